// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// Fidelity of the accelerator rows (accels.go), through the real client.
// The figures are written out here from GCE's pages, apart from the rows,
// so that a wrong row fails rather than being restated.

// gpuOnN1 is an N1 VM of machine type mt in zone with gpus of accel.
func gpuOnN1(name, zone, mt, accel string, gpus int32) *computepb.Instance {
	inst := t4Instance(name, zone, gpus)
	inst.MachineType = proto.String("zones/" + zone + "/machineTypes/" + mt)
	inst.GuestAccelerators[0].AcceleratorType = proto.String("zones/" + zone + "/acceleratorTypes/" + accel)
	return inst
}

// roomFor lifts the quotas a test's inserts would otherwise run into, so
// that only the machine rules decide.
func roomFor(s *Server, region string) {
	s.SetQuota(region, "CPUS", 10000)
	s.SetQuota(region, "INSTANCES", 1000)
	s.SetQuota("", "GPUS_ALL_REGIONS", 1000)
	for _, a := range accelTable() {
		s.SetQuota(region, a.quotaMetric, 1000)
		s.SetQuota(region, a.preemptibleMetric, 1000)
	}
}

func limitMessage(mt string, cpus, memMB, maxCPUs, maxGB, gpus int32, accel string) string {
	return fmt.Sprintf("Machine type '%s' (%d vCPUs, %d MB) exceeds the limit of %d vCPUs and %d GB memory for %d x %s.", mt, cpus, memMB, maxCPUs, maxGB, gpus, accel)
}

// For each GPU that attaches to N1, each count's largest VM is accepted
// and the next larger N1 shape is refused with GCE's message. The largest
// VM is the custom type at the limit: N1 custom types take 1 or an even
// number of vCPUs, so the next larger in vCPUs has 2 more; at 96 vCPUs,
// N1's own maximum, there is none. Memory is N1's 6.5 GB per vCPU at
// every limit but the P100's in us-east1-c, so one GB more is refused by
// the custom-type rule there and by the GPU limit only in us-east1-c.
func TestAttachedGPULimits(t *testing.T) {
	type limit struct{ gpus, cpus, gb int32 }
	// https://cloud.google.com/compute/docs/gpus, "N1 general-purpose
	// machine series": per GPU model, GPU count, available vCPUs and
	// available memory.
	families := []struct {
		accel, zone string
		limits      []limit
		badCounts   []int32
	}{
		{accelT4, "us-central1-a", []limit{{1, 48, 312}, {2, 48, 312}, {4, 96, 624}}, []int32{3, 8}},
		{accelV100, "us-central1-a", []limit{{1, 12, 78}, {2, 24, 156}, {4, 48, 312}, {8, 96, 624}}, []int32{3, 16}},
		{accelP100, "us-central1-c", []limit{{1, 16, 104}, {2, 32, 208}, {4, 96, 624}}, []int32{3, 8}},
		// "4 GPUs: 1 - 64 vCPUs, 1 - 208 GB" in us-east1-c (and
		// europe-west1-b, -d, which the world does not have).
		{accelP100, "us-east1-c", []limit{{1, 16, 104}, {2, 32, 208}, {4, 64, 208}}, nil},
		{accelP4, "us-central1-a", []limit{{1, 24, 156}, {2, 48, 312}, {4, 96, 624}}, []int32{3, 8}},
	}
	covered := map[string]bool{}
	for _, f := range families {
		covered[f.accel] = true
		t.Run(f.accel+"/"+f.zone, func(t *testing.T) {
			s := newFake(t)
			roomFor(s, f.zone[:strings.LastIndex(f.zone, "-")])
			c := instancesClient(t, s)
			for _, l := range f.limits {
				mem := l.gb * 1024
				largest := fmt.Sprintf("custom-%d-%d", l.cpus, mem)
				mustInsert(t, c, f.zone, gpuOnN1(fmt.Sprintf("max-%d", l.gpus), f.zone, largest, f.accel, l.gpus))
				if l.cpus < 96 {
					more := fmt.Sprintf("custom-%d-%d", l.cpus+2, mem)
					expectInvalidIn(t, s, f.zone, gpuOnN1("more-cpus", f.zone, more, f.accel, l.gpus),
						limitMessage(more, l.cpus+2, mem, l.cpus, l.gb, l.gpus, f.accel))
				}
				bigger := fmt.Sprintf("custom-%d-%d", l.cpus, mem+1024)
				want := "between 0.9 GB and 6.5 GB per vCPU"
				if mem+1024 <= l.cpus*6656 {
					want = limitMessage(bigger, l.cpus, mem+1024, l.cpus, l.gb, l.gpus, f.accel)
				}
				expectInvalidIn(t, s, f.zone, gpuOnN1("more-memory", f.zone, bigger, f.accel, l.gpus), want)
			}
			for _, n := range f.badCounts {
				expectInvalidIn(t, s, f.zone, gpuOnN1("bad-count", f.zone, "n1-standard-4", f.accel, n),
					fmt.Sprintf("'resource.guestAccelerators[0].acceleratorCount': '%d'", n))
			}
		})
	}
	for _, a := range accelTable() {
		if a.attach != nil && !covered[a.name] {
			t.Errorf("%s attaches to N1 but has no case here", a.name)
		}
		// A zone's own limit replaces a count's limit; it cannot be the
		// only one, or the other zones would have none.
		for _, n := range a.counts() {
			if _, ok := a.limit(n, "no-such-zone"); !ok {
				t.Errorf("%s: %d GPUs have no limit outside the zones a row names", a.name, n)
			}
		}
	}
}

// The case the T4's limits let through before each GPU had its own row: an
// n1-standard-16 with one V100 is over the V100's 12 vCPUs per GPU.
func TestV100PerCountLimit(t *testing.T) {
	s := newFake(t)
	roomFor(s, "us-central1")
	c := instancesClient(t, s)
	expectInvalidIn(t, s, zoneA, gpuOnN1("v100-16", zoneA, "n1-standard-16", accelV100, 1),
		"Invalid value for field 'resource.machineType': 'zones/us-central1-a/machineTypes/n1-standard-16'. "+
			limitMessage("n1-standard-16", 16, 61440, 12, 78, 1, accelV100))
	mustInsert(t, c, zoneA, gpuOnN1("v100-8", zoneA, "n1-standard-8", accelV100, 1))
	mustInsert(t, c, zoneA, gpuOnN1("v100x2-16", zoneA, "n1-standard-16", accelV100, 2))
	mustInsert(t, c, zoneA, gpuOnN1("t4-16", zoneA, "n1-standard-16", accelT4, 1))
	// The P100's zone limit holds in its zone only: 4 P100s on an
	// n1-standard-96 (360 GB) in us-central1-c, not in us-east1-c.
	roomFor(s, "us-east1")
	mustInsert(t, c, "us-central1-c", gpuOnN1("p100-96", "us-central1-c", "n1-standard-96", accelP100, 4))
	expectInvalidIn(t, s, "us-east1-c", gpuOnN1("p100-96", "us-east1-c", "n1-standard-96", accelP100, 4),
		limitMessage("n1-standard-96", 96, 368640, 64, 208, 4, accelP100))
}

// Each GPU sold bundled comes with its machine types and only those: each
// is in the catalogue with its GPUs and accepted without
// guestAccelerators; the GPU does not attach to N1, and the types do not
// take guestAccelerators.
func TestBundledGPUMachineTypes(t *testing.T) {
	type shape struct {
		name            string
		cpus, memMB, gp int32
	}
	// compute/docs/accelerator-optimized-machines: A3 High (#a3-high-vms;
	// the world has only the 1-GPU type) and G2 (#g2-vms).
	families := []struct {
		accel, zone string
		shapes      []shape
	}{
		{accelH100, zoneA, []shape{{"a3-highgpu-1g", 26, 234 * 1024, 1}}},
		{accelL4, zoneA, []shape{
			{"g2-standard-4", 4, 16 * 1024, 1}, {"g2-standard-8", 8, 32 * 1024, 1}, {"g2-standard-12", 12, 48 * 1024, 1},
			{"g2-standard-16", 16, 64 * 1024, 1}, {"g2-standard-24", 24, 96 * 1024, 2}, {"g2-standard-32", 32, 128 * 1024, 1},
			{"g2-standard-48", 48, 192 * 1024, 4}, {"g2-standard-96", 96, 384 * 1024, 8},
		}},
	}
	covered := map[string]bool{}
	for _, f := range families {
		covered[f.accel] = true
		t.Run(f.accel, func(t *testing.T) {
			s := newFake(t)
			roomFor(s, "us-central1")
			c := instancesClient(t, s)
			mt := newClient(t, s, compute.NewMachineTypesRESTClient)
			var got, want []string
			for _, m := range collect(t, mt.List(testCtx(t), &computepb.ListMachineTypesRequest{Project: testProject, Zone: f.zone}).Next, func(m *computepb.MachineType) *computepb.MachineType { return m }) {
				for _, a := range m.GetAccelerators() {
					if a.GetGuestAcceleratorType() == f.accel {
						got = append(got, fmt.Sprintf("%s %d %d %d", m.GetName(), m.GetGuestCpus(), m.GetMemoryMb(), a.GetGuestAcceleratorCount()))
					}
				}
			}
			for _, sh := range f.shapes {
				want = append(want, fmt.Sprintf("%s %d %d %d", sh.name, sh.cpus, sh.memMB, sh.gp))
				inst := t4Instance(sh.name, f.zone, 1)
				inst.GuestAccelerators = nil
				inst.MachineType = proto.String("zones/" + f.zone + "/machineTypes/" + sh.name)
				// A3 High with one GPU is sold as Spot; A3 disks are NVMe and
				// its NIC gVNIC, which a G2 takes too.
				inst.Scheduling = &computepb.Scheduling{ProvisioningModel: proto.String("SPOT"), InstanceTerminationAction: proto.String("DELETE")}
				inst.NetworkInterfaces[0].NicType = proto.String("GVNIC")
				mustInsert(t, c, f.zone, inst)
				withGPUs := t4Instance(sh.name+"-attached", f.zone, sh.gp)
				withGPUs.MachineType = inst.MachineType
				withGPUs.GuestAccelerators[0].AcceleratorType = proto.String("zones/" + f.zone + "/acceleratorTypes/" + f.accel)
				expectInvalidIn(t, s, f.zone, withGPUs, "guestAccelerators must not be specified")
			}
			sort.Strings(got)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("machine types with %s in %s: %v, want %v", f.accel, f.zone, got, want)
			}
			expectInvalidIn(t, s, f.zone, gpuOnN1("attached", f.zone, "n1-standard-8", f.accel, 1),
				fmt.Sprintf("Accelerator type '%s' is only available bundled", f.accel))
		})
	}
	for _, a := range accelTable() {
		if a.bundled != nil && !covered[a.name] {
			t.Errorf("%s comes bundled but has no case here", a.name)
		}
	}
}

// expectInvalidIn is expectInvalid for an insert into zone.
func expectInvalidIn(t *testing.T, s *Server, zone string, inst *computepb.Instance, contain string) {
	t.Helper()
	gerr := insertErr(t, s, zone, inst, 400, "invalid")
	if !strings.Contains(gerr.Message, contain) {
		t.Errorf("%s in %s: message %q, want %q", inst.GetName(), zone, gerr.Message, contain)
	}
}

// A boot console counts an instance's GPUs as its guest would: attached,
// bundled with its machine type, or none.
func TestInstanceGPUs(t *testing.T) {
	t4 := "zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4"
	for _, tc := range []struct {
		inst *computepb.Instance
		want int32
	}{
		{&computepb.Instance{MachineType: proto.String("zones/us-central1-a/machineTypes/n1-standard-8"),
			GuestAccelerators: []*computepb.AcceleratorConfig{{AcceleratorType: &t4, AcceleratorCount: proto.Int32(2)}}}, 2},
		{&computepb.Instance{MachineType: proto.String("zones/us-central1-a/machineTypes/a3-highgpu-1g")}, 1},
		{&computepb.Instance{MachineType: proto.String("zones/us-central1-a/machineTypes/g2-standard-96")}, 8},
		{&computepb.Instance{MachineType: proto.String("zones/us-central1-a/machineTypes/e2-medium")}, 0},
	} {
		if got := InstanceGPUs(tc.inst); got != tc.want {
			t.Errorf("%s: %d GPUs, want %d", tc.inst.GetMachineType(), got, tc.want)
		}
	}
}
