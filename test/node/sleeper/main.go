// Command sleeper is the one program of the node harness's image: it prints
// its arguments as one line on stdout, the line the test reads back through
// the API server, then waits for SIGTERM or SIGINT and exits 0. Standard
// library only and built static, so the image is a single file. With no
// arguments it prints nothing: the pod sandbox's "pause" container.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Println(strings.Join(os.Args[1:], " "))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
