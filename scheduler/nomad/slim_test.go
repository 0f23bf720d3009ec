package nomad

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// decodeFull decodes a line as it is, without slimBatch.
func decodeFull(t testing.TB, line []byte) (wireBatch, error) {
	t.Helper()
	var b wireBatch
	err := json.Unmarshal(line, &b)
	return b, err
}

// Every line of the stream recorded on Nomad 2.0.6 decodes the same
// through slimBatch as decoded whole, and the slimmed line is much
// smaller.
func TestSlimBatchMatchesFullDecodeOnRecordedStream(t *testing.T) {
	var in, out int
	var scratch []byte
	for i, line := range recordedStream(t) {
		want, err := decodeFull(t, line)
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		slim, ok := slimBatch(nil, line)
		if !ok {
			t.Fatalf("line %d: slimBatch gave up on a real Nomad line", i)
		}
		in, out = in+len(line), out+len(slim)
		var got wireBatch
		if err := decodeBatch(line, &got, &scratch); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("line %d decodes differently when slimmed:\n got %+v\nwant %+v", i, got, want)
		}
	}
	if out*2 > in {
		t.Errorf("slimmed stream is %d of %d bytes; want well under half", out, in)
	}
}

// batchKeep must list every field the wire structs decode: a field added
// to them and not to batchKeep would silently decode as zero.
func TestSlimKeepCoversWireStructs(t *testing.T) {
	var check func(path string, typ reflect.Type, k keep)
	check = func(path string, typ reflect.Type, k keep) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() == reflect.Map {
			sub, ok := k["*"]
			if !ok {
				t.Errorf("%s is a map but batchKeep has no \"*\" for it", path)
				return
			}
			if sub != nil {
				check(path+".*", typ.Elem(), sub)
			}
			return
		}
		if typ.Kind() != reflect.Struct {
			t.Errorf("%s: batchKeep filters a %s", path, typ)
			return
		}
		for f := range typ.Fields() {
			if !f.IsExported() {
				continue // not decoded
			}
			sub, ok := k[f.Name]
			if !ok {
				t.Errorf("%s.%s is decoded but not kept by batchKeep", path, f.Name)
				continue
			}
			if sub != nil {
				check(path+"."+f.Name, f.Type, sub)
			}
		}
	}
	check("wireBatch", reflect.TypeFor[wireBatch](), batchKeep)
}

// Dropped members may hold anything JSON allows: strings with escaped
// quotes and brackets, nested arrays, numbers with exponents, unicode.
func TestSlimBatchTrickyInput(t *testing.T) {
	line := `{"Index":7,"Junk":{"a":"}]\"{[\\","b":[1,-2.5e+3,true,null,{"c":"\u00e9"}]},` +
		`"Events":[{"Topic":"Job","Type":"JobRegistered","Key":"j\"1","Namespace":"default","Index":7,` +
		`"FilterKeys":["x"],"Payload":{"Job":{"ID":"j\"1","Meta":{"impact_tier":"high","note":"a \"quoted\" {brace}"},` +
		`"Payload":"ignored","TaskGroups":[{"Name":"g","Count":2,"Tasks":[{"Name":"t","Config":{"args":["]","}"]},` +
		`"Resources":{"CPU":100,"Devices":[{"Name":"nvidia/gpu","Count":4}]}}]}],"JobModifyIndex":7}}},` +
		`{"Topic":"Evaluation","Type":"EvaluationUpdated","Key":"e","Index":7,"Payload":{"Evaluation":{"ID":"e","Status":"blocked"}}},` +
		`{"Topic":"Node","Type":"NodeRegistration","Key":"n","Index":7,"Payload":{"Node":null}}]} `
	want, err := decodeFull(t, []byte(line))
	if err != nil {
		t.Fatal(err)
	}
	var got wireBatch
	if err := decodeBatch([]byte(line), &got, nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got.Events[0].Payload.Job.Meta["note"] != `a "quoted" {brace}` || got.Events[0].Payload.Job.TaskGroups[0].Tasks[0].Resources.Devices[0].Name != "nvidia/gpu" {
		t.Fatalf("kept values mangled: %+v", got.Events[0].Payload.Job)
	}
	if slim, _ := slimBatch(nil, []byte(line)); strings.Contains(string(slim), "Junk") || strings.Contains(string(slim), "Config") {
		t.Errorf("dropped members kept: %s", slim)
	}
	// Malformed lines: slimBatch gives up (or json rejects what it kept),
	// and decodeBatch reports the line's own JSON error.
	for _, bad := range []string{`{"Index":1,"Events":[{"Topic":"Job"`, `{"Index":1,,}`, `[1,2]`, `{"Index":"x\"}`, `{"Index":1} trailing`} {
		var b wireBatch
		if err := decodeBatch([]byte(bad), &b, nil); err == nil {
			t.Errorf("%q decoded without error", bad)
		}
	}
}

// FuzzSlimBatch: whenever a line decodes as it is, it decodes to the same
// batch through slimBatch.
func FuzzSlimBatch(f *testing.F) {
	for _, l := range recordedStream(f) {
		f.Add(l)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"Index":3,"Events":[{"Topic":"Node","Key":"n","Payload":{"Node":{"ID":"n","Meta":{"rack":"r\\1"}}}}]}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		want, err := decodeFull(t, line)
		if err != nil {
			return
		}
		var got wireBatch
		if err := decodeBatch(line, &got, nil); err != nil {
			t.Fatalf("full decode works, slim path fails: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("slim decode differs:\n got %+v\nwant %+v", got, want)
		}
	})
}

// BenchmarkDecodeBatch compares decoding the recorded stream's lines as
// they are ("whole") and through slimBatch ("slim").
func BenchmarkDecodeBatch(b *testing.B) {
	lines := recordedStream(b)
	size := 0
	for _, l := range lines {
		size += len(l)
	}
	b.Run("whole", func(b *testing.B) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			for _, l := range lines {
				var batch wireBatch
				if err := json.Unmarshal(l, &batch); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("slim", func(b *testing.B) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		var scratch []byte
		for b.Loop() {
			for _, l := range lines {
				var batch wireBatch
				if err := decodeBatch(l, &batch, &scratch); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
