module github.com/ratelimit-go/ratelimit/tools/archcheck

go 1.26.0

require (
	github.com/stretchr/testify v1.12.1
	golang.org/x/tools v0.51.0
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
)
