package preflight

import (
	"fmt"

	"cloud.google.com/go/compute/apiv1/computepb"
)

// The pod network between a worker node and a podVM is a VXLAN tunnel,
// and CAA v0.22.0 fixes its MTU on both ends from the worker pod's
// interface (src/cloud-api-adaptor at 38d0fcf7):
//
//   - worker side: pkg/podnetwork/workernode.go (Inspect) reads the MTU of
//     the pod's interface in its network namespace, which the cluster's
//     CNI gives the node's NIC MTU, i.e. the VPC's; the interface is
//     tc-redirected into a VXLAN device on the node
//     (pkg/podnetwork/tunneler/vxlan/workernode.go), whose encapsulated
//     packets leave through the node's NIC.
//   - podVM side: that MTU travels in the podVM's user-data
//     (pkg/adaptor/cloud/cloud.go, forwarder.Config.PodNetwork) to the
//     agent-protocol-forwarder, which names its VXLAN device after the pod
//     interface and sets its MTU to min(that MTU, maxMTU = 1450)
//     (pkg/podnetwork/tunneler/vxlan/podnode.go). The podVM's own NIC gets
//     the VPC's MTU from GCE's DHCP when it boots.
//
// TCP to or from a podVM therefore carries segments of up to
// min(VPC MTU, 1450) bytes (the podVM end's MSS bounds both directions),
// and each leaves a NIC as a UDP packet VXLAN made 50 bytes longer
// (outer IPv4 20 + UDP 8 + VXLAN 8 + inner Ethernet 14). On GCE's default
// 1460 that is 1500 bytes through a 1460-byte VPC: the handshake and small
// messages pass, full-size segments fragment or are dropped ("works for
// small requests, hangs on large ones"; NCCL's all-reduces between two
// podVMs are exactly that traffic).
const (
	caaVXLANMaxMTU = 1450 // pkg/podnetwork/tunneler/vxlan/podnode.go, maxMTU
	vxlanOverhead  = 50
	// gceDefaultMTU is what GCE gives a network created without --mtu
	// (https://cloud.google.com/vpc/docs/mtu).
	gceDefaultMTU = 1460
)

// TunnelMTU is the inner MTU of a podVM's pod interface on a VPC of mtu
// bytes, and the size its full packets have on the VPC.
func TunnelMTU(vpcMTU int) (inner, outer int) {
	inner = min(vpcMTU, caaVXLANMaxMTU)
	return inner, inner + vxlanOverhead
}

// checkMTU fails when a full-size pod packet through the VXLAN tunnel does
// not fit the VPC. The fix raises the VPC's MTU to the smallest that fits
// (GCE allows 1300 to 8896); GCE's "Change the MTU setting of a network"
// says running VMs keep the old MTU until they are stopped and started, so
// the worker nodes must be restarted (a node pool upgrade or recreate) and
// podVMs, which take it from DHCP at boot, recreated.
func checkMTU(project string, net *computepb.Network) Result {
	check := "mtu " + net.GetName()
	mtu := int(net.GetMtu())
	if mtu == 0 {
		mtu = gceDefaultMTU
	}
	inner, outer := TunnelMTU(mtu)
	if outer <= mtu {
		return pass(check, "VPC MTU %d holds the pod tunnel: the podVMs' pod interface gets MTU %d (CAA caps it at %d), %d bytes with VXLAN's %d", mtu, inner, caaVXLANMaxMTU, outer, vxlanOverhead)
	}
	need := caaVXLANMaxMTU + vxlanOverhead
	return fail(check,
		fmt.Sprintf("gcloud compute networks update %s --project=%s --mtu=%d   # VMs use a new MTU only after a stop and start: then recreate the worker nodes (GKE: the node pools' nodes) and delete running peer pods so their podVMs are recreated", net.GetName(), project, need),
		"VPC MTU %d is too small for the pod tunnel: the worker's pod interface follows the VPC (%d), CAA v0.22.0 sets the podVM's to min(%d, %d) = %d, and VXLAN adds %d bytes, so full-size pod packets are %d bytes on a %d-byte network (they fragment or drop; large transfers such as NCCL's hang)",
		mtu, mtu, mtu, caaVXLANMaxMTU, inner, vxlanOverhead, outer, mtu)
}
