// Package promratelimit exports what ratelimit's limiters and decorators report.
package promratelimit
