package bench

import "math"

// Projection's assumptions: a core of a trigger process is planned busy at most
// projectionBusy of the time (the rest is headroom for bursts, rebuilds after a
// restart and the partitions' rebalancing), and a trigger process runs on
// projectionCoresPerProcess cores of its own.
const (
	projectionBusy            = 0.6
	projectionCoresPerProcess = 2
)

// projectionRates are the fleet rates the doc projects, in messages per second.
var projectionRates = []float64{10_000, 100_000, 1_000_000}

// ProjectionRow is what a fleet publishing Rate messages per second needs of trigger
// processes, by the measured CPU per message.
type ProjectionRow struct {
	Rate float64
	// TriggerCores is the CPU the trigger spends at Rate; PlannedCores adds the
	// headroom; Processes is the trigger processes of projectionCoresPerProcess cores
	// that hold them, and Partitions the partitions the streams need so each has one.
	TriggerCores, PlannedCores float64
	Processes, Partitions      int
	// ServerCores is the nats-server CPU at Rate by its measured CPU per message (0
	// when not measured), for scale: not part of the trigger's count.
	ServerCores float64
}

// Projection projects the trigger processes a fleet needs at each of projectionRates
// from cpu's figures (none when the trigger's CPU was not measured).
func Projection(cpu CPUReport) []ProjectionRow {
	if cpu.TriggerPerMillion <= 0 {
		return nil
	}
	var out []ProjectionRow
	for _, rate := range projectionRates {
		p := ProjectionRow{Rate: rate, TriggerCores: rate * cpu.TriggerPerMillion / 1e6, ServerCores: rate * cpu.ServerPerMillion / 1e6}
		p.PlannedCores = p.TriggerCores / projectionBusy
		p.Processes = max(1, int(math.Ceil(p.PlannedCores/projectionCoresPerProcess)))
		p.Partitions = 1
		for p.Partitions < p.Processes {
			p.Partitions *= 2
		}
		out = append(out, p)
	}
	return out
}
