package ratelimit_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// README.md's Go code is kept equal to Example functions, which go test
// compiles and runs, so that what the front page shows cannot drift from
// what builds. Each ```go block is preceded (blank lines aside) by a marker:
//
//	<!-- example: ExampleName -->           the body of ExampleName, in this package's _test.go files
//	<!-- example: httplimit/ExampleName --> the same in httplimit's _test.go files (a path from the root)
//	<!-- example: none: why not -->         not compiled, for the reason given
//
// The block must equal the Example's body up to its "// Output:" comment,
// or, when the body holds a line "// readme:begin" and a line
// "// readme:end", the lines between them (so that setup and printing stay
// out of the README), each side with its common leading tabs removed and
// trailing blank lines dropped. An unmarked block, a none without a reason,
// an Example not found and a block that differs are each an error.

// readmeMarker matches a marker line and captures what it names.
var readmeMarker = regexp.MustCompile(`^<!--\s*example:\s*(.*?)\s*-->$`)

// readmeBlock is one ```go block of a Markdown file.
type readmeBlock struct {
	line   int    // the line of its opening fence, from 1
	marker string // what its marker names; "" without one
	code   string
}

// readmeBlocks returns the ```go blocks of the Markdown text md.
func readmeBlocks(md string) []readmeBlock {
	var blocks []readmeBlock
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(fence, "```") {
			continue
		}
		lang := strings.TrimSpace(strings.TrimPrefix(fence, "```"))
		start := i
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		if lang != "go" && lang != "golang" {
			continue
		}
		b := readmeBlock{line: start + 1, code: strings.Join(lines[start+1:min(i, len(lines))], "\n")}
		for j := start - 1; j >= 0; j-- {
			if prev := strings.TrimSpace(lines[j]); prev != "" {
				if m := readmeMarker.FindStringSubmatch(prev); m != nil {
					b.marker = m[1]
				}
				break
			}
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// exampleBody returns the code the README shows of the Example function
// name in the _test.go files of dir: its body up to "// Output:", or the
// lines between "// readme:begin" and "// readme:end".
func exampleBody(dir, name string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return "", err
	}
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
		if err != nil {
			return "", err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Name.Name != name || fn.Body == nil {
				continue
			}
			body := src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset]
			return readmeRegion(string(body)), nil
		}
	}
	return "", fmt.Errorf("no func %s in %s", name, filepath.Join(dir, "*_test.go"))
}

// readmeRegion returns the part of an Example's body the README shows.
func readmeRegion(body string) string {
	lines := strings.Split(body, "\n")
	begin, end := -1, len(lines)
	for i, l := range lines {
		switch t := strings.TrimSpace(l); {
		case t == "// readme:begin":
			begin = i
		case t == "// readme:end":
			end = i
		case begin < 0 && (strings.HasPrefix(t, "// Output:") || strings.HasPrefix(t, "// Unordered output:")):
			end = min(end, i)
		}
	}
	if begin >= 0 {
		return dedent(strings.Join(lines[begin+1:end], "\n"))
	}
	return dedent(strings.Join(lines[:end], "\n"))
}

// dedent removes the leading tabs every non-blank line of code has, trailing
// spaces, and blank lines at either end.
func dedent(code string) string {
	lines := strings.Split(code, "\n")
	common := -1
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
		if lines[i] == "" {
			continue
		}
		tabs := len(lines[i]) - len(strings.TrimLeft(lines[i], "\t"))
		if common < 0 || tabs < common {
			common = tabs
		}
	}
	for i, l := range lines {
		if l != "" {
			lines[i] = l[common:]
		}
	}
	return strings.Trim(strings.Join(lines, "\n"), "\n")
}

// readmeProblems checks the ```go blocks of the Markdown file at path, whose
// markers name Examples by a directory relative to root, and returns what is
// wrong, one problem a string.
func readmeProblems(root, path string) []string {
	md, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for _, b := range readmeBlocks(string(md)) {
		where := fmt.Sprintf("%s:%d", path, b.line)
		switch {
		case b.marker == "":
			problems = append(problems, fmt.Sprintf("%s: a ```go block without a marker: precede it with <!-- example: ExampleName --> (or <!-- example: none: why it is not compiled -->)", where))
		case b.marker == "none" || strings.HasPrefix(b.marker, "none:") || strings.HasPrefix(b.marker, "none "):
			if strings.TrimLeft(strings.TrimPrefix(b.marker, "none"), ": ") == "" {
				problems = append(problems, fmt.Sprintf("%s: <!-- example: none --> needs a reason: <!-- example: none: why it is not compiled -->", where))
			}
		default:
			dir, name := filepath.Split(b.marker)
			want, err := exampleBody(filepath.Join(root, dir), name)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: <!-- example: %s -->: %v", where, b.marker, err))
				continue
			}
			if got := dedent(b.code); got != want {
				problems = append(problems, fmt.Sprintf("%s: the block differs from %s (- the Example, + the README):\n%s", where, b.marker, lineDiff(want, got)))
			}
		}
	}
	return problems
}

// lineDiff returns the lines of a and b, those only in a marked "-", those
// only in b "+", from their longest common subsequence.
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	// lcs[i][j] is the length of the longest common subsequence of x[i:]
	// and y[j:].
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			fmt.Fprintf(&out, "  %s\n", x[i])
			i, j = i+1, j+1
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			fmt.Fprintf(&out, "- %s\n", x[i])
			i++
		default:
			fmt.Fprintf(&out, "+ %s\n", y[j])
			j++
		}
	}
	return out.String()
}

func TestReadmeGoBlocksEqualTheirExamples(t *testing.T) {
	for _, p := range readmeProblems(".", "README.md") {
		t.Error(p)
	}
}

func TestReadmeCheckFindsEveryKindOfProblem(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "x_test.go"), []byte(`package sub

import "fmt"

func ExampleWhole() {
	x := 1
	fmt.Println(x)
	// Output: 1
}

func ExampleRegion() {
	x := 1
	// readme:begin
	if x > 0 {
		fmt.Println(x)
	}
	// readme:end
	// Output: 1
}
`), 0o644))
	md := "# t\n\n" +
		"<!-- example: sub/ExampleWhole -->\n\n```go\nx := 1\nfmt.Println(x)\n```\n\n" + // equal
		"<!-- example: sub/ExampleRegion -->\n```go\nif x > 0 {\n\tfmt.Println(x)\n}\n```\n" + // equal
		"```go\nunmarked()\n```\n" +
		"<!-- example: none -->\n```go\nno reason\n```\n" +
		"<!-- example: none: a list of imports -->\n```go\nimport \"x\"\n```\n" + // fine
		"<!-- example: sub/ExampleMissing -->\n```go\nx\n```\n" +
		"<!-- example: sub/ExampleWhole -->\n```go\nx := 2\nfmt.Println(x)\n```\n" +
		"```sh\nnot go\n```\n"
	path := filepath.Join(dir, "README.md")
	require.NoError(t, os.WriteFile(path, []byte(md), 0o644))

	problems := readmeProblems(dir, path)
	require.Len(t, problems, 4, "%q", problems)
	assert.Contains(t, problems[0], "README.md:16: a ```go block without a marker")
	assert.Contains(t, problems[1], "README.md:20: <!-- example: none --> needs a reason")
	assert.Contains(t, problems[2], "README.md:28: <!-- example: sub/ExampleMissing -->: no func ExampleMissing")
	assert.Contains(t, problems[3], "README.md:32: the block differs from sub/ExampleWhole (- the Example, + the README):\n- x := 1\n+ x := 2\n  fmt.Println(x)\n")
}
