package plugin

import (
	"errors"
	"fmt"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/structspb"
	"github.com/impact-sched/nomad-impact/plugin/units"
)

// IntAttr is an integer attribute with an optional unit (see plugin/units).
func IntAttr(v int64, unit string) *structspb.Attribute {
	return &structspb.Attribute{Value: &structspb.Attribute_IntVal{IntVal: v}, Unit: unit}
}

// FloatAttr is a float attribute with an optional unit (see plugin/units).
func FloatAttr(v float64, unit string) *structspb.Attribute {
	return &structspb.Attribute{Value: &structspb.Attribute_FloatVal{FloatVal: v}, Unit: unit}
}

// StringAttr is a string attribute. Nomad compares constraint values by
// kind, so give numeric facts IntAttr/FloatAttr, not strings.
func StringAttr(v string) *structspb.Attribute {
	return &structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: v}}
}

// BoolAttr is a boolean attribute.
func BoolAttr(v bool) *structspb.Attribute {
	return &structspb.Attribute{Value: &structspb.Attribute_BoolVal{BoolVal: v}}
}

// ValidateAttribute applies the client's checks on a device attribute:
// exactly one value, and a unit only on numbers and only one of
// plugin/units.
func ValidateAttribute(a *structspb.Attribute) error {
	if a == nil || a.GetValue() == nil {
		return errors.New("attribute has no value")
	}
	if a.GetUnit() == "" {
		return nil
	}
	switch a.GetValue().(type) {
	case *structspb.Attribute_IntVal, *structspb.Attribute_FloatVal:
	default:
		return fmt.Errorf("unit %q on a non-numeric attribute", a.GetUnit())
	}
	if !units.Known(a.GetUnit()) {
		return fmt.Errorf("unknown unit %q", a.GetUnit())
	}
	return nil
}

// ValidateFingerprint applies the client's checks on a device fingerprint
// message. One failure makes a real client drop every device of the plugin
// and stop it, so device plugins should check before sending.
func ValidateFingerprint(resp *devicepb.FingerprintResponse) error {
	var errs []error
	for i, g := range resp.GetDeviceGroup() {
		if g == nil {
			errs = append(errs, fmt.Errorf("device group %d is nil", i))
			continue
		}
		where := fmt.Sprintf("device group %d (%s/%s/%s)", i, g.GetVendor(), g.GetDeviceType(), g.GetDeviceName())
		if g.GetVendor() == "" || g.GetDeviceType() == "" || g.GetDeviceName() == "" {
			errs = append(errs, fmt.Errorf("%s: vendor, device_type and device_name are required", where))
		}
		for j, d := range g.GetDevices() {
			if d == nil || d.GetID() == "" {
				errs = append(errs, fmt.Errorf("%s: device %d has no ID", where, j))
			}
		}
		keys := make([]string, 0, len(g.GetAttributes()))
		for k := range g.GetAttributes() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := ValidateAttribute(g.GetAttributes()[k]); err != nil {
				errs = append(errs, fmt.Errorf("%s: attribute %q: %w", where, k, err))
			}
		}
	}
	return errors.Join(errs...)
}

// TaskError is the gRPC error a driver returns from StartTask (or when a
// TaskStats stream cannot start) so that the client sees whether a retry may
// help: the status carries a RecoverableError detail, which the client reads
// (the code is FailedPrecondition, as Nomad's own SDK sends). Without such a
// detail a StartTask failure is final.
func TaskError(err error, recoverable bool) error {
	if err == nil {
		return nil
	}
	st, derr := status.New(codes.FailedPrecondition, err.Error()).WithDetails(&structspb.RecoverableError{Recoverable: recoverable})
	if derr != nil {
		// Only fails if the detail cannot be marshalled; keep the error.
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return st.Err()
}

// IsRecoverable reads the RecoverableError detail of a gRPC error, as the
// client does: ok is false when the error carries none.
func IsRecoverable(err error) (recoverable, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus {
		return false, false
	}
	for _, d := range st.Details() {
		if re, isRE := d.(*structspb.RecoverableError); isRE {
			return re.GetRecoverable(), true
		}
	}
	return false, false
}
