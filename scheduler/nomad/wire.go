package nomad

import (
	"encoding/json"
	"time"
)

// The watcher decodes only the fields it uses. Nomad's event payloads are
// whole jobs, allocations and nodes (several KB each); decoding them into
// these small structs with encoding/json is several times faster than
// api.Event's map[string]any + mapstructure route, which matters at tens
// of thousands of events per second.

type wireBatch struct {
	Events []wireEvent
	Index  uint64
}

type wireEvent struct {
	Topic     string
	Type      string
	Key       string
	Namespace string
	Index     uint64
	Payload   wirePayload
}

// wirePayload has no field for the Evaluation topic's payload: the model
// has no use for evaluations (the executor asks Nomad about blocked ones
// when it needs to), so the decoder skips them without allocating.
type wirePayload struct {
	Job        *wireJob
	Allocation *wireAlloc
	Node       *wireNode
	Deleted    bool
}

type wireJob struct {
	ID             string
	Namespace      string
	Name           string
	Type           string
	NodePool       string
	Status         string
	Priority       int
	Stop           bool
	SubmitTime     int64
	Version        uint64
	CreateIndex    uint64
	ModifyIndex    uint64
	JobModifyIndex uint64
	Meta           map[string]string
	Constraints    []wireConstraint
	TaskGroups     []wireGroup
}

type wireGroup struct {
	Name        string
	Count       int
	Meta        map[string]string
	Constraints []wireConstraint
	Tasks       []wireTask
}

type wireConstraint struct {
	LTarget string
	RTarget string
	Operand string
}

type wireTask struct {
	Name        string
	Driver      string
	Constraints []wireConstraint
	Resources   *struct {
		Devices []struct {
			Name        string
			Count       *uint64
			Constraints []wireConstraint
		}
	}
}

type wireAlloc struct {
	ID string
	// Name is Nomad's "<job>.<group>[<index>]": a replacement takes the
	// name of the member it replaces, linked or not (replacements a
	// blocked evaluation places carry no PreviousAllocation).
	Name          string
	Namespace     string
	JobID         string
	TaskGroup     string
	NodeID        string
	DesiredStatus string
	ClientStatus  string
	CreateIndex   uint64
	ModifyIndex   uint64
	CreateTime    int64
	ModifyTime    int64
	// JobVersion is the job version the allocation runs (the allocation
	// list has it; allocation events do not: 0). PreviousAllocation is set
	// on a replacement Nomad placed for a lost, failed or stopped one
	// (reschedule or migration).
	JobVersion         uint64
	PreviousAllocation string
	// NextAllocation names the replacement of this one; the allocation
	// list gives no PreviousAllocation, so a resync learns replacements
	// from it.
	NextAllocation     string
	AllocatedResources *struct {
		Tasks map[string]struct {
			Devices []struct {
				Vendor    string
				Type      string
				Name      string
				DeviceIDs []string
			}
		}
	}
	TaskStates map[string]struct {
		State      string
		Failed     bool
		StartedAt  time.Time
		FinishedAt time.Time
		// Events: a terminal allocation's tell how its tasks ended
		// (Terminated: exit code, signal, OOM), for the reason a gang
		// that lost it is requeued (endedWhy).
		Events []wireTaskEvent
	}
	// listed: read from the allocation list (a resync), whose JobVersion
	// is real.
	listed bool
}

type wireTaskEvent struct {
	Type    string
	Details map[string]string
}

type wireNode struct {
	ID                    string
	Name                  string
	NodePool              string
	Datacenter            string
	Status                string
	SchedulingEligibility string
	Drain                 bool
	NodeClass             string
	Meta                  map[string]string
	Attributes            map[string]string
	ModifyIndex           uint64
	NodeResources         *struct {
		Devices []wireDeviceGroup
	}
}

type wireDeviceGroup struct {
	Vendor    string
	Type      string
	Name      string
	Instances []struct {
		ID                string
		Healthy           bool
		HealthDescription string
		Locality          *struct{ PciBusID string }
	}
	Attributes map[string]*wireAttr
}

type wireAttr struct {
	Float  *float64
	Int    *int64
	String *string
	Bool   *bool
	Unit   string
}

// decodeBatch decodes one NDJSON line of the event stream. A heartbeat
// (`{}`) decodes to a batch with Index 0 and no events. It decodes the line
// reduced to what the wire structs use (slimBatch), or the line as it is
// when that fails; scratch, when not nil, keeps the reduced line's buffer
// from one call to the next.
func decodeBatch(line []byte, into *wireBatch, scratch *[]byte) error {
	var buf []byte
	if scratch != nil {
		buf = (*scratch)[:0]
	}
	slim, ok := slimBatch(buf, line)
	if scratch != nil {
		*scratch = slim[:0]
	}
	if ok {
		*into = wireBatch{}
		if err := json.Unmarshal(slim, into); err == nil {
			return nil
		}
	}
	*into = wireBatch{}
	return json.Unmarshal(line, into)
}
