package device

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/impact-sched/nomad-impact/device/gpu"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
)

// Environment variables Reserve sets.
const (
	EnvNVIDIAVisible = "NVIDIA_VISIBLE_DEVICES"
	EnvCUDAVisible   = "CUDA_VISIBLE_DEVICES"
	// EnvBlockPrefix starts the one variable per reservation that names
	// its GPUs under a key of its own (BlockEnvKey). Nomad calls Reserve
	// once per device block and merges the maps last-wins, so a task
	// with several GPU device blocks keeps only the last block's GPUs in
	// the two variables above; the per-block variables all survive, and
	// impact-exec unions them (driver.VisibleDevices).
	EnvBlockPrefix = "IMPACT_GPU_BLOCK_"
)

// BlockEnvKey is the per-block variable of a reservation whose GPUs, in
// order, start with first: EnvBlockPrefix and the ID with every character
// outside [A-Za-z0-9] turned into '_' and letters upper-cased. Instance IDs
// are unique on a node, so two blocks of one task never share a key.
func BlockEnvKey(first string) string {
	b := []byte(strings.ToUpper(first))
	for i, c := range b {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	return EnvBlockPrefix + string(b)
}

// Control device nodes every CUDA process needs, besides /dev/nvidia<minor>.
var controlNodes = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}

// requestError is a reserve failure caused by the request itself (IDs not
// in the latest fingerprint, an ID asked for twice): the client gets
// InvalidArgument, not Internal, since retrying cannot help.
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

// hostRoots are where reserve looks on the host: Dev for device nodes
// (normally /dev) and Proc for the driver's proc files (normally /proc).
// Tests point both at fake trees.
type hostRoots struct {
	Dev, Proc string
}

// migCapsDir is where the driver lists the MIG capability files of each
// GPU, by the GPU's minor number, relative to the proc root.
const migCapsDir = "driver/nvidia/capabilities"

// reserve builds the container reservation for a set of instance IDs:
// both visibility variables with the UUIDs in NVLink-friendly order (Nomad
// hands them over in arbitrary order), the block's own variable
// (BlockEnvKey) with the same list, and the device nodes that exist on
// this host. A MIG instance also needs the capability device nodes of its
// GPU instance and compute instance (/dev/nvidia-caps/nvidia-cap<N>, N read
// from the driver's proc files), or CUDA in an exec-style task cannot open
// it; the config/monitor capabilities are not needed by tasks and are not
// passed. It is pure apart from reading the host roots. Warnings say what
// could not be passed and why (a missing proc file: the task is still
// given what exists, and the operator learns why the MIG device fails).
func reserve(snap *snapshot, ids []string, roots hostRoots) (*devicepb.ContainerReservation, []string, error) {
	res := &devicepb.ContainerReservation{Envs: map[string]string{}}
	if len(ids) == 0 {
		return res, nil, nil
	}
	var unknown []string
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			return nil, nil, &requestError{msg: fmt.Sprintf("device ID %s requested twice", id)}
		}
		seen[id] = true
		if _, ok := snap.byID[id]; !ok {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, nil, &requestError{msg: "unknown device IDs: " + strings.Join(unknown, ", ")}
	}
	ordered := snap.topo.Order(ids)
	list := strings.Join(ordered, ",")
	res.Envs[EnvNVIDIAVisible] = list
	res.Envs[EnvCUDAVisible] = list
	res.Envs[BlockEnvKey(ordered[0])] = list

	// nodes are paths relative to /dev.
	var nodes, warnings []string
	have := map[string]bool{}
	add := func(n string) {
		if !have[n] {
			have[n] = true
			nodes = append(nodes, n)
		}
	}
	for _, id := range ordered {
		info := snap.byID[id]
		minor := info.Device.Minor
		if minor < 0 {
			continue // the driver did not say; there is no node to guess
		}
		add("nvidia" + strconv.Itoa(minor))
		if info.MIG == nil {
			continue
		}
		if info.MIG.IDsUnknown {
			warnings = append(warnings, fmt.Sprintf("MIG instance %s: the driver did not report its GPU/compute instance IDs, so its capability devices are unknown", id))
			continue
		}
		caps, err := migCapNodes(roots.Proc, minor, *info.MIG)
		if err != nil {
			var missing *missingCapError
			if errors.As(err, &missing) {
				warnings = append(warnings, fmt.Sprintf("MIG instance %s: %v", id, err))
				continue
			}
			return nil, nil, fmt.Errorf("MIG instance %s: %w", id, err)
		}
		for _, c := range caps {
			add(c)
		}
	}
	nodes = append(nodes, controlNodes...)
	for _, n := range nodes {
		host := filepath.Join(roots.Dev, n)
		if _, err := os.Stat(host); err != nil {
			if strings.HasPrefix(n, "nvidia-caps/") {
				warnings = append(warnings, fmt.Sprintf("MIG capability device %s: %v", host, err))
			}
			continue
		}
		res.Devices = append(res.Devices, &devicepb.DeviceSpec{TaskPath: "/dev/" + n, HostPath: host, Permissions: "rwm"})
	}
	return res, warnings, nil
}

// missingCapError is a MIG capability proc file that does not exist (a
// driver without /proc capabilities, or an instance destroyed since the
// last scan): reserve warns and passes the rest.
type missingCapError struct{ path string }

func (e *missingCapError) Error() string {
	return fmt.Sprintf("capability file %s does not exist", e.path)
}

// migCapNodes returns the capability device nodes (relative to /dev) of a
// MIG instance: the access file of its GPU instance, then that of its
// compute instance, as the NVIDIA container toolkit mounts them.
func migCapNodes(procRoot string, parentMinor int, m gpu.MIGInstance) ([]string, error) {
	gi := filepath.Join(procRoot, migCapsDir, "gpu"+strconv.Itoa(parentMinor), "mig", "gi"+strconv.Itoa(m.GPUInstanceID))
	files := []string{
		filepath.Join(gi, "access"),
		filepath.Join(gi, "ci"+strconv.Itoa(m.ComputeInstanceID), "access"),
	}
	var out []string
	for _, f := range files {
		n, err := readCapMinor(f)
		if err != nil {
			return nil, err
		}
		out = append(out, "nvidia-caps/nvidia-cap"+strconv.Itoa(n))
	}
	return out, nil
}

// readCapMinor reads the "DeviceFileMinor: N" line of a capability proc
// file. A file without it, or with a value that is not a minor number, is
// an error naming the file rather than a guessed device.
func readCapMinor(path string) (int, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, &missingCapError{path: path}
	}
	if err != nil {
		return 0, fmt.Errorf("read capability file: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "DeviceFileMinor" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return 0, fmt.Errorf("capability file %s: DeviceFileMinor %q is not a device minor number", path, strings.TrimSpace(v))
		}
		return n, nil
	}
	return 0, fmt.Errorf("capability file %s: no DeviceFileMinor line", path)
}
