package device

import (
	"github.com/impact-sched/nomad-impact/device/topology"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/structspb"
)

// fingerprintResponse converts the plain groups to the wire message.
func fingerprintResponse(groups []group) *devicepb.FingerprintResponse {
	resp := &devicepb.FingerprintResponse{DeviceGroup: make([]*devicepb.DeviceGroup, 0, len(groups))}
	for _, g := range groups {
		pg := &devicepb.DeviceGroup{Vendor: Vendor, DeviceType: DeviceType, DeviceName: g.Name,
			Attributes: make(map[string]*structspb.Attribute, len(g.Attributes))}
		for _, in := range g.Instances {
			d := &devicepb.DetectedDevice{ID: in.ID, Healthy: in.Healthy, HealthDescription: in.Desc}
			if in.PCIBusID != "" {
				d.HwLocality = &devicepb.DeviceLocality{PciBusId: in.PCIBusID}
			}
			pg.Devices = append(pg.Devices, d)
		}
		for k, a := range g.Attributes {
			pg.Attributes[k] = attributeProto(a)
		}
		resp.DeviceGroup = append(resp.DeviceGroup, pg)
	}
	return resp
}

func attributeProto(a topology.Attribute) *structspb.Attribute {
	out := &structspb.Attribute{Unit: a.Unit}
	switch {
	case a.Int != nil:
		out.Value = &structspb.Attribute_IntVal{IntVal: *a.Int}
	case a.Float != nil:
		out.Value = &structspb.Attribute_FloatVal{FloatVal: *a.Float}
	case a.String != nil:
		out.Value = &structspb.Attribute_StringVal{StringVal: *a.String}
	case a.Bool != nil:
		out.Value = &structspb.Attribute_BoolVal{BoolVal: *a.Bool}
	}
	return out
}

// AttributeFromProto converts a wire attribute back (for tests and tools
// that read fingerprints).
func AttributeFromProto(a *structspb.Attribute) topology.Attribute {
	out := topology.Attribute{Unit: a.GetUnit()}
	switch v := a.GetValue().(type) {
	case *structspb.Attribute_IntVal:
		x := v.IntVal
		out.Int = &x
	case *structspb.Attribute_FloatVal:
		x := v.FloatVal
		out.Float = &x
	case *structspb.Attribute_StringVal:
		x := v.StringVal
		out.String = &x
	case *structspb.Attribute_BoolVal:
		x := v.BoolVal
		out.Bool = &x
	}
	return out
}

// GroupsFromFingerprint converts a fingerprint to topology.DeviceGroup, the
// shape topology.FromAttributes reads.
func GroupsFromFingerprint(resp *devicepb.FingerprintResponse) []topology.DeviceGroup {
	var out []topology.DeviceGroup
	for _, g := range resp.GetDeviceGroup() {
		dg := topology.DeviceGroup{Vendor: g.GetVendor(), Type: g.GetDeviceType(), Name: g.GetDeviceName(),
			Attributes: map[string]topology.Attribute{}}
		for _, d := range g.GetDevices() {
			dg.Instances = append(dg.Instances, topology.Instance{ID: d.GetID(), Healthy: d.GetHealthy(),
				HealthDescription: d.GetHealthDescription(), PCIBusID: d.GetHwLocality().GetPciBusId()})
		}
		for k, a := range g.GetAttributes() {
			dg.Attributes[k] = AttributeFromProto(a)
		}
		out = append(out, dg)
	}
	return out
}
