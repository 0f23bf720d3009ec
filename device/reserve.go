package device

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
)

// Environment variables Reserve sets.
const (
	EnvNVIDIAVisible = "NVIDIA_VISIBLE_DEVICES"
	EnvCUDAVisible   = "CUDA_VISIBLE_DEVICES"
)

// Control device nodes every CUDA process needs, besides /dev/nvidia<minor>.
var controlNodes = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}

// requestError is a reserve failure caused by the request itself (IDs not
// in the latest fingerprint, an ID asked for twice): the client gets
// InvalidArgument, not Internal, since retrying cannot help.
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

// reserve builds the container reservation for a set of instance IDs:
// both visibility variables with the UUIDs in NVLink-friendly order (Nomad
// hands them over in arbitrary order), and the device nodes that exist on
// this host. It is pure apart from checking devRoot for device nodes.
func reserve(snap *snapshot, ids []string, devRoot string) (*devicepb.ContainerReservation, error) {
	res := &devicepb.ContainerReservation{Envs: map[string]string{}}
	if len(ids) == 0 {
		return res, nil
	}
	var unknown []string
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			return nil, &requestError{msg: fmt.Sprintf("device ID %s requested twice", id)}
		}
		seen[id] = true
		if _, ok := snap.byID[id]; !ok {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, &requestError{msg: "unknown device IDs: " + strings.Join(unknown, ", ")}
	}
	ordered := snap.topo.Order(ids)
	list := strings.Join(ordered, ",")
	res.Envs[EnvNVIDIAVisible] = list
	res.Envs[EnvCUDAVisible] = list

	var nodes []string
	have := map[string]bool{}
	for _, id := range ordered {
		minor := snap.byID[id].Device.Minor
		if minor < 0 {
			continue // the driver did not say; there is no node to guess
		}
		n := "nvidia" + strconv.Itoa(minor)
		if !have[n] {
			have[n] = true
			nodes = append(nodes, n)
		}
	}
	nodes = append(nodes, controlNodes...)
	for _, n := range nodes {
		host := filepath.Join(devRoot, n)
		if _, err := os.Stat(host); err != nil {
			continue
		}
		res.Devices = append(res.Devices, &devicepb.DeviceSpec{TaskPath: "/dev/" + n, HostPath: host, Permissions: "rwm"})
	}
	return res, nil
}
