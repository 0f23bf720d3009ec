package sim

import (
	"os"
	"strings"
	"testing"
)

func TestParseClusterHCLExample(t *testing.T) {
	src, err := os.ReadFile("../../example/sim/cluster.hcl")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseClusterHCL(src, "cluster.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Nodes) != 64 || c.GPUs() != 512 || c.Nodes[0].Islands != 2 || c.Nodes[7].Rack != "rack-00" || c.Nodes[8].Rack != "rack-01" {
		t.Fatalf("cluster = %d nodes, %d GPUs, first %+v, 8th %+v", len(c.Nodes), c.GPUs(), c.Nodes[0], c.Nodes[8])
	}
}

func TestParseClusterHCLMixed(t *testing.T) {
	src := `
node_group "a" {
  count = 3
  gpus = 8
  islands = 2
  rack_size = 2
}
node_group "b" {
  count = 2
  gpus = 4
}
`
	c, err := ParseClusterHCL([]byte(src), "m.hcl")
	if err != nil {
		t.Fatal(err)
	}
	racks := []string{}
	for _, n := range c.Nodes {
		racks = append(racks, n.Name+"@"+n.Rack)
	}
	want := "a-000@rack-00 a-001@rack-00 a-002@rack-01 b-000@rack-02 b-001@rack-02"
	if got := strings.Join(racks, " "); got != want {
		t.Fatalf("nodes %s, want %s", got, want)
	}
	if c.MaxNodeGPUs() != 8 || c.GPUs() != 32 || c.Nodes[4].Islands != 1 {
		t.Fatalf("max %d gpus %d", c.MaxNodeGPUs(), c.GPUs())
	}
}

func TestParseClusterHCLErrors(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"no groups", ``, "no node_group block"},
		{"missing gpus", "node_group \"a\" {\n  count = 2\n}\n", `m.hcl:1,16-16: node_group "a": Missing required argument; The argument "gpus" is required`},
		{"unknown attr", "node_group \"a\" {\n  count = 2\n  gpus = 8\n  gpu = 8\n}\n", `m.hcl:4,3-6: node_group "a" gpu: Unsupported argument; An argument named "gpu" is not expected here.`},
		{"bad islands", "node_group \"a\" {\n  count = 2\n  gpus = 8\n  islands = 3\n}\n", `m.hcl:4,3-14: node_group "a" islands: (3) must divide gpus (8) evenly`},
		{"not a number", "node_group \"a\" {\n  count = \"two\"\n  gpus = 8\n}\n", `m.hcl:2,12-15: node_group "a" count: Unsuitable value type; Unsuitable value: a number is required`},
		{"not whole", "node_group \"a\" {\n  count = 2\n  gpus = 1.5\n}\n", `m.hcl:3,10-13: node_group "a" gpus: Unsuitable value type`},
		{"zero", "node_group \"a\" {\n  count = 0\n  gpus = 8\n}\n", `m.hcl:2,3-12: node_group "a" count: must be at least 1, got 0`},
		{"zero rack", "node_group \"a\" {\n  count = 2\n  gpus = 8\n  rack_size = 0\n}\n", `m.hcl:4,3-16: node_group "a" rack_size: must be at least 1, got 0`},
		{"unknown block", "rack \"x\" {}\n", `m.hcl:1,1-5: rack "x": Unsupported block type; Blocks of type "rack" are not expected here.`},
		{"syntax", "node_group \"a\" {\n", `m.hcl:1`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseClusterHCL([]byte(tc.src), "m.hcl")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestUniformClusterValidates(t *testing.T) {
	if _, err := UniformCluster(0, 8, 2, 8); err == nil {
		t.Fatal("0 nodes accepted")
	}
	if _, err := UniformCluster(2, 8, 3, 8); err == nil || !strings.Contains(err.Error(), "islands must divide") {
		t.Fatalf("error = %v", err)
	}
}
