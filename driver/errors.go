package driver

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/impact-sched/nomad-impact/plugin/proto/structspb"
)

// fatal is a StartTask failure a restart will not fix.
func fatal(code codes.Code, format string, args ...any) error {
	return withRecoverable(code, fmt.Sprintf(format, args...), false)
}

// recoverable is a failure a restart may fix (Nomad applies the restart
// policy).
func recoverable(code codes.Code, format string, args ...any) error {
	return withRecoverable(code, fmt.Sprintf(format, args...), true)
}

func withRecoverable(code codes.Code, msg string, rec bool) error {
	st, err := status.New(code, msg).WithDetails(&structspb.RecoverableError{Recoverable: rec})
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}

// IsRecoverable reports the recoverable flag of a gRPC error from the driver.
func IsRecoverable(err error) (bool, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return false, false
	}
	for _, det := range st.Details() {
		if r, ok := det.(*structspb.RecoverableError); ok {
			return r.GetRecoverable(), true
		}
	}
	return false, false
}
