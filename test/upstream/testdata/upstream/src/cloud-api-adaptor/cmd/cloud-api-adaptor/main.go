// Command cloud-api-adaptor is a stand-in for upstream's: `help` lists the
// providers linked into the binary, which is what the patch script checks.
package main

import (
	"fmt"
	"os"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "help" {
		fmt.Fprintln(os.Stderr, "usage: cloud-api-adaptor help")
		os.Exit(2)
	}
	fmt.Println("providers:")
	for _, name := range provider.List() {
		fmt.Println("  " + name)
	}
}
