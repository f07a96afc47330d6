// Package repocheck holds tests of the repository itself rather than of a
// package: that `make help` lists every target and that the docs name what
// exists. It has no code of its own.
package repocheck
