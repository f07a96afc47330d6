// Command snapshotter-standin is the node harness's stand-in for the nydus
// snapshotter kata-deploy runs for guest pull (nydus-for-kata-tee): a
// containerd proxy snapshotter on a unix socket, backed by containerd's
// own overlayfs snapshotter. It models only what containerd asks of a
// proxy snapshotter (the snapshots API: prepare, mounts, commit, remove,
// usage); nothing of nydus itself (no lazy pull, no guest pull: the
// layers are unpacked on the node, as they are without a snapshotter).
//
//	snapshotter-standin SOCKET ROOT
package main

import (
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/contrib/snapshotservice"
	"github.com/containerd/containerd/v2/plugins/snapshots/overlay"
	"google.golang.org/grpc"
)

func main() {
	log.SetPrefix("[snapshotter stand-in] ")
	if len(os.Args) != 3 {
		log.Fatal("usage: snapshotter-standin SOCKET ROOT")
	}
	sock, root := os.Args[1], os.Args[2]
	sn, err := overlay.NewSnapshotter(root)
	if err != nil {
		log.Fatalf("overlayfs snapshotter in %s: %v", root, err)
	}
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	snapshotsapi.RegisterSnapshotsServer(s, snapshotservice.FromSnapshotter(sn))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		s.Stop()
	}()
	log.Printf("serving the snapshots API on %s, overlayfs in %s", sock, root)
	if err := s.Serve(l); err != nil {
		log.Print(err)
	}
	_ = sn.Close()
	_ = os.Remove(sock)
}
