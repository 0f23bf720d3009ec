// Package plugintest is a conformance harness for Nomad plugins built on
// package plugin (or on anything else that speaks Nomad's protocol).
//
// Launch starts a plugin binary the way a Nomad client does: the same
// go-plugin client configuration (app protocol 2, Nomad's magic cookie, gRPC
// only, no AutoMTLS), the agent's environment plus go-plugin's handshake
// variables, and the same plugin sets. LoadLikeNomad replays the client's
// whole loading sequence (fingerprint process, validation process with two
// SetConfig calls and no Nomad settings, runtime process). EncodeConfig
// encodes config as the agent does: HCL decoded against the plugin's schema,
// then go-cty MessagePack.
//
// StartDevice/StartDriver serve an implementation in-process through
// go-plugin's test mode, for fast unit tests of a plugin's services.
package plugintest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/zclconf/go-cty/cty"

	"github.com/impact-sched/nomad-impact/plugin"
	"github.com/impact-sched/nomad-impact/plugin/config"
	"github.com/impact-sched/nomad-impact/plugin/hclspec"
	"github.com/impact-sched/nomad-impact/plugin/proto/basepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
	"github.com/impact-sched/nomad-impact/plugin/proto/hclspecpb"
)

// Options tune Launch.
type Options struct {
	// Args are appended to the command line (the plugin block's args).
	Args []string
	// Env is added to the inherited environment, as an agent's own
	// environment would be.
	Env []string
	// Logger receives go-plugin's client logs and the plugin's stderr;
	// Launch defaults it to the test log.
	Logger hclog.Logger
	// BaseOnly dispenses only "base", like the client's fingerprint
	// process.
	BaseOnly bool
}

// Instance is a running plugin and its gRPC clients.
type Instance struct {
	Kind   plugin.Kind
	Client *goplugin.Client
	Base   basepb.BasePluginClient
	// Device is set for device plugins unless BaseOnly.
	Device devicepb.DevicePluginClient
	// Driver is set for driver plugins unless BaseOnly.
	Driver driverpb.DriverClient
}

// Kill stops the plugin (gracefully, then forcibly) and waits for it.
func (i *Instance) Kill() { i.Client.Kill() }

// Exited reports whether the plugin process has exited.
func (i *Instance) Exited() bool { return i.Client.Exited() }

// ClientConfig is the go-plugin client configuration a Nomad client uses to
// launch a plugin binary.
func ClientConfig(binary string, kind plugin.Kind, opts Options) *goplugin.ClientConfig {
	cmd := exec.Command(binary, opts.Args...)
	// go-plugin appends the inherited environment and the handshake
	// variables (cookie, PLUGIN_MIN_PORT/MAX_PORT, PLUGIN_PROTOCOL_VERSIONS).
	cmd.Env = append([]string(nil), opts.Env...)
	set := plugin.ClientPluginSet(kind)
	if opts.BaseOnly {
		set = plugin.BaseOnlyPluginSet()
	}
	return &goplugin.ClientConfig{
		HandshakeConfig:  plugin.Handshake(),
		Plugins:          set,
		Cmd:              cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Logger:           opts.Logger,
	}
}

// LaunchE starts binary as a plugin of the given kind and dispenses its
// clients. The caller must Kill it.
func LaunchE(binary string, kind plugin.Kind, opts Options) (*Instance, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	client := goplugin.NewClient(ClientConfig(binary, kind, opts))
	inst, err := dispense(client, kind, opts.BaseOnly)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("launch %s plugin %s: %w", kind, filepath.Base(binary), err)
	}
	return inst, nil
}

// Launch is LaunchE for tests: it fails the test on error, logs the
// plugin's output to the test log and kills the plugin at cleanup.
func Launch(tb testing.TB, binary string, kind plugin.Kind, opts Options) *Instance {
	tb.Helper()
	if opts.Logger == nil {
		opts.Logger = TestLogger(tb)
	}
	inst, err := LaunchE(binary, kind, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(inst.Kill)
	return inst
}

func dispense(client *goplugin.Client, kind plugin.Kind, baseOnly bool) (*Instance, error) {
	rpc, err := client.Client()
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	inst := &Instance{Kind: kind, Client: client}
	raw, err := rpc.Dispense(plugin.PluginSetBase)
	if err != nil {
		return nil, fmt.Errorf("dispense base: %w", err)
	}
	var ok bool
	if inst.Base, ok = raw.(basepb.BasePluginClient); !ok {
		return nil, fmt.Errorf("dispense base: got %T", raw)
	}
	if baseOnly {
		return inst, nil
	}
	raw, err = rpc.Dispense(kind.String())
	if err != nil {
		return nil, fmt.Errorf("dispense %s: %w", kind, err)
	}
	switch kind {
	case plugin.KindDevice:
		inst.Device, ok = raw.(devicepb.DevicePluginClient)
	case plugin.KindDriver:
		inst.Driver, ok = raw.(driverpb.DriverClient)
	}
	if !ok {
		return nil, fmt.Errorf("dispense %s: got %T", kind, raw)
	}
	return inst, nil
}

// NegotiateAPIVersion picks the API version the way the Nomad client does:
// the plugin's entry equal to a client-supported version (only
// plugin.APIVersion today), returned in the plugin's own spelling. It fails
// on an empty or unparseable list and when nothing overlaps.
func NegotiateAPIVersion(info *basepb.PluginInfoResponse) (string, error) {
	if len(info.GetPluginApiVersions()) == 0 {
		return "", errors.New("plugin reports no API versions")
	}
	want := strings.TrimPrefix(plugin.APIVersion, "v")
	for _, v := range info.GetPluginApiVersions() {
		norm := strings.TrimPrefix(v, "v")
		if norm == "" {
			return "", fmt.Errorf("plugin API version %q does not parse", v)
		}
		if sameVersion(norm, want) {
			return v, nil
		}
	}
	return "", fmt.Errorf("no overlap between plugin API versions %v and the client's [%s]", info.GetPluginApiVersions(), plugin.APIVersion)
}

// sameVersion compares dotted versions numerically, treating missing
// components as zero (so 0.1 equals 0.1.0, as go-version does).
func sameVersion(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for len(pa) < len(pb) {
		pa = append(pa, "0")
	}
	for len(pb) < len(pa) {
		pb = append(pb, "0")
	}
	for i := range pa {
		if strings.TrimLeft(pa[i], "0") != strings.TrimLeft(pb[i], "0") {
			return false
		}
	}
	return true
}

// EncodeConfig decodes HCL native syntax (the body of a config block)
// against spec and encodes the value as the Nomad client does. A nil spec
// with empty src gives empty bytes, as the client sends for a plugin
// without schema.
func EncodeConfig(spec *hclspecpb.Spec, src string) ([]byte, error) {
	return encodeConfig(spec, src, "", "config.hcl", hclspec.DecodeHCL)
}

// EncodeConfigJSON is EncodeConfig for HCL JSON syntax, the route agent
// plugin config really takes (the config map is JSON-encoded first).
func EncodeConfigJSON(spec *hclspecpb.Spec, src string) ([]byte, error) {
	return encodeConfig(spec, src, "{}", "config.json", hclspec.DecodeJSON)
}

// encodeConfig decodes src with decode and marshals the value; empty is
// the syntax's spelling of "no config" besides blank text, filename names
// src in errors.
func encodeConfig(spec *hclspecpb.Spec, src, empty, filename string, decode func(*hclspecpb.Spec, []byte, string) (cty.Value, error)) ([]byte, error) {
	if spec == nil {
		if trimmed := strings.TrimSpace(src); trimmed != "" && trimmed != empty {
			return nil, errors.New("configuration not allowed but config passed")
		}
		return nil, nil
	}
	val, err := decode(spec, []byte(src), filename)
	if err != nil {
		return nil, err
	}
	return config.Marshal(val)
}

// SetConfigHCL fetches the plugin's schema, encodes src against it and
// calls SetConfig with the negotiated API version and nomad settings
// (nil = validation-process style).
func (i *Instance) SetConfigHCL(ctx context.Context, src string, nomad *basepb.NomadConfig) error {
	info, err := i.Base.PluginInfo(ctx, &basepb.PluginInfoRequest{})
	if err != nil {
		return fmt.Errorf("PluginInfo: %w", err)
	}
	api, err := NegotiateAPIVersion(info)
	if err != nil {
		return err
	}
	schema, err := i.Base.ConfigSchema(ctx, &basepb.ConfigSchemaRequest{})
	if err != nil {
		return fmt.Errorf("ConfigSchema: %w", err)
	}
	data, err := EncodeConfig(schema.GetSpec(), src)
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	_, err = i.Base.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: data, NomadConfig: nomad, PluginApiVersion: api})
	return err
}

// DefaultNomadConfig is the agent settings a runtime process receives with
// default client ports.
func DefaultNomadConfig() *basepb.NomadConfig {
	return &basepb.NomadConfig{Driver: &basepb.NomadDriverConfig{ClientMinPort: 14000, ClientMaxPort: 14512}}
}

// LoadLikeNomad replays the Nomad client's loading of a plugin binary and
// returns the runtime instance (killed at test cleanup):
//
//  1. fingerprint process, plugin set {base}: PluginInfo (type must match
//     kind, versions must parse, API version must overlap), ConfigSchema
//     (must convert to an hcldec spec); killed.
//  2. validation process, full set: config encoded against the schema,
//     SetConfig twice without Nomad settings; killed.
//  3. runtime process, full set: SetConfig once with nomad settings.
//
// Any failure fails the test, as it would abort the agent's start-up.
func LoadLikeNomad(tb testing.TB, binary string, kind plugin.Kind, configHCL string, opts Options) *Instance {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	fpOpts := opts
	fpOpts.BaseOnly = true
	fp := Launch(tb, binary, kind, fpOpts)
	info, err := fp.Base.PluginInfo(ctx, &basepb.PluginInfoRequest{})
	if err != nil {
		tb.Fatalf("fingerprint: PluginInfo: %v", err)
	}
	if info.GetType() != kind.PluginType() {
		tb.Fatalf("fingerprint: plugin type %v, want %v", info.GetType(), kind.PluginType())
	}
	if err := (plugin.Info{Name: info.GetName(), Version: info.GetPluginVersion(), APIVersions: info.GetPluginApiVersions()}).Validate(); err != nil {
		tb.Fatalf("fingerprint: %v", err)
	}
	api, err := NegotiateAPIVersion(info)
	if err != nil {
		tb.Fatalf("fingerprint: %v", err)
	}
	schema, err := fp.Base.ConfigSchema(ctx, &basepb.ConfigSchemaRequest{})
	if err != nil {
		tb.Fatalf("fingerprint: ConfigSchema: %v", err)
	}
	fp.Kill()
	spec := schema.GetSpec()
	if spec != nil {
		if err := hclspec.Validate(spec); err != nil {
			tb.Fatalf("fingerprint: config schema: %v", err)
		}
	}
	data, err := EncodeConfig(spec, configHCL)
	if err != nil {
		tb.Fatalf("encode config: %v", err)
	}
	req := &basepb.SetConfigRequest{MsgpackConfig: data, PluginApiVersion: api}

	if spec != nil {
		val := Launch(tb, binary, kind, opts)
		for n := 1; n <= 2; n++ {
			if _, err := val.Base.SetConfig(ctx, req); err != nil {
				tb.Fatalf("validation: SetConfig call %d: %v", n, err)
			}
		}
		val.Kill()
	}

	rt := Launch(tb, binary, kind, opts)
	rtReq := &basepb.SetConfigRequest{MsgpackConfig: data, PluginApiVersion: api, NomadConfig: DefaultNomadConfig()}
	if _, err := rt.Base.SetConfig(ctx, rtReq); err != nil {
		tb.Fatalf("runtime: SetConfig: %v", err)
	}
	return rt
}

// TestLogger is an hclog logger writing to tb's log until the test ends.
func TestLogger(tb testing.TB) hclog.Logger {
	w := &tbWriter{tb: tb}
	tb.Cleanup(w.close)
	return hclog.New(&hclog.LoggerOptions{Name: "plugintest", Level: hclog.Debug, Output: w})
}

// tbWriter forwards to tb.Log and drops writes after cleanup, since
// go-plugin may relay a dying plugin's last stderr lines late.
type tbWriter struct {
	mu     sync.Mutex
	tb     testing.TB
	closed bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.tb.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *tbWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

var _ io.Writer = (*tbWriter)(nil)

// BuildMain compiles the Go main package pkg (an import path, or a path
// relative to the current directory starting with ./ or ../) into dir and
// returns the binary's path.
func BuildMain(ctx context.Context, pkg, dir string) (string, error) {
	// go test puts its own toolchain first on the PATH of the tests.
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build %s: no go toolchain on PATH: %w", pkg, err)
	}
	name := filepath.Base(strings.TrimSuffix(pkg, "/"))
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	out := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// RunWithMain is a TestMain body for a package whose tests launch one
// binary many times: it builds the main package pkg once (BuildMain) into a
// temporary directory, stores its path in *bin, runs the tests and removes
// the directory. It returns the exit code for os.Exit; a failed build is
// printed and is exit code 1.
func RunWithMain(m *testing.M, pkg string, bin *string) int {
	dir, err := os.MkdirTemp("", "plugintest-"+filepath.Base(strings.TrimSuffix(pkg, "/")))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	*bin, err = BuildMain(ctx, pkg, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// Build is BuildMain into a per-test temporary directory. Tests that launch
// the same binary many times should build it once in TestMain instead.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := BuildMain(ctx, pkg, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}
