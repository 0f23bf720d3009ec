package device

import (
	"context"
	"fmt"
	"math"

	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/impact-sched/nomad-impact/device/gpu"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/structspb"
)

// Stat names, as Nomad shows them (nomad node status -stats).
const (
	StatGPUUtil     = "GPU utilization"
	StatMemUtil     = "Memory utilization"
	StatMemory      = "Memory state"
	StatPower       = "Power usage"
	StatTemperature = "Temperature"
	StatECCCorr     = "ECC errors corrected"
	StatECCUncorr   = "ECC errors uncorrected"
)

// collectStats samples the present physical GPUs of the snapshot. MIG
// instances get no stats (NVML has no per-instance utilisation).
func collectStats(ctx context.Context, b gpu.Backend, snap *snapshot) (*devicepb.StatsResponse, error) {
	var uuids []string
	for id, info := range snap.byID {
		if info.MIG == nil && snap.present[id] {
			uuids = append(uuids, id)
		}
	}
	if len(uuids) == 0 {
		// Nothing to sample (no GPUs, or no driver): no backend call,
		// so a missing NVML is not logged every second.
		return &devicepb.StatsResponse{}, nil
	}
	samples, err := b.Stats(ctx, uuids)
	if err != nil {
		return nil, fmt.Errorf("read GPU stats: %w", err)
	}
	byID := make(map[string]gpu.Stats, len(samples))
	for _, s := range samples {
		byID[s.UUID] = s
	}
	resp := &devicepb.StatsResponse{}
	for _, g := range snap.groups {
		gs := &devicepb.DeviceGroupStats{Vendor: Vendor, Type: DeviceType, Name: g.Name, InstanceStats: map[string]*devicepb.DeviceStats{}}
		for _, in := range g.Instances {
			s, ok := byID[in.ID]
			if !ok {
				continue
			}
			power := -1
			if info, ok := snap.byID[in.ID]; ok {
				power = info.Device.PowerLimitW
			}
			gs.InstanceStats[in.ID] = deviceStats(s, power)
		}
		if len(gs.InstanceStats) > 0 {
			resp.Groups = append(resp.Groups, gs)
		}
	}
	return resp, nil
}

func na(unit, desc string) *structspb.StatValue {
	return &structspb.StatValue{StringVal: wrapperspb.String("N/A"), Unit: unit, Desc: desc}
}

func intStat(v int64, unit, desc string) *structspb.StatValue {
	return &structspb.StatValue{IntNumeratorVal: wrapperspb.Int64(v), Unit: unit, Desc: desc}
}

// deviceStats converts one sample, with the units Nomad shows: percent,
// MiB, W (not the raw mW), degrees C and error counts.
func deviceStats(s gpu.Stats, powerLimitW int) *devicepb.DeviceStats {
	attrs := map[string]*structspb.StatValue{}
	const (
		dUtil  = "GPU (SM) utilisation over the last sample period"
		dMUtil = "memory controller utilisation"
		dMem   = "framebuffer memory used / total"
		dPow   = "power draw / power limit"
		dTemp  = "GPU core temperature"
		dCorr  = "corrected ECC errors since the driver loaded"
		dUnc   = "uncorrected ECC errors since the driver loaded"
	)
	if s.HasUtilization {
		attrs[StatGPUUtil] = intStat(int64(s.UtilizationPct), "%", dUtil)
		attrs[StatMemUtil] = intStat(int64(s.MemoryUtilizationPct), "%", dMUtil)
	} else {
		attrs[StatGPUUtil] = na("%", dUtil)
		attrs[StatMemUtil] = na("%", dMUtil)
	}
	if s.HasMemory {
		attrs[StatMemory] = &structspb.StatValue{IntNumeratorVal: wrapperspb.Int64(int64(s.MemoryUsedMiB)),
			IntDenominatorVal: wrapperspb.Int64(int64(s.MemoryTotalMiB)), Unit: "MiB", Desc: dMem}
	} else {
		attrs[StatMemory] = na("MiB", dMem)
	}
	if s.HasPower {
		v := &structspb.StatValue{FloatNumeratorVal: wrapperspb.Double(math.Round(s.PowerW*10) / 10), Unit: "W", Desc: dPow}
		if powerLimitW > 0 {
			v.FloatDenominatorVal = wrapperspb.Double(float64(powerLimitW))
		}
		attrs[StatPower] = v
	} else {
		attrs[StatPower] = na("W", dPow)
	}
	if s.HasTemperature {
		attrs[StatTemperature] = intStat(int64(s.TemperatureC), "C", dTemp)
	} else {
		attrs[StatTemperature] = na("C", dTemp)
	}
	if s.HasECC {
		attrs[StatECCCorr] = intStat(int64(s.ECCCorrected), "#", dCorr)
		attrs[StatECCUncorr] = intStat(int64(s.ECCUncorrected), "#", dUnc)
	} else {
		attrs[StatECCCorr] = na("#", dCorr)
		attrs[StatECCUncorr] = na("#", dUnc)
	}
	return &devicepb.DeviceStats{
		Summary:   attrs[StatGPUUtil],
		Stats:     &structspb.StatObject{Attributes: attrs},
		Timestamp: timestamppb.New(s.Time),
	}
}
