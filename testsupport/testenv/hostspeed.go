package testenv

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The deadlines of the VM tests (QEMU boots under TCG, image builds) are
// written for this project's reference host, a 2-core CI machine running
// `make test` alone. A host that is busier or slower gets them stretched by
// the factor HostSlowdown measures, so that a boot that is merely slow there
// is not failed on wall time: a test fails on what it checks.

// maxSlowdown bounds the factor: a host more than this much slower than the
// reference would turn a hung boot into an hour's wait, and go test's own
// -timeout ends the run first anyway.
const maxSlowdown = 8

// refWorkCPU is the CPU time the calibration work (calibrationSteps of
// work) takes on the reference host; a host whose CPU needs longer for it is
// slower in proportion.
const refWorkCPU = 100 * time.Millisecond

// calibrationSteps is how many steps of plain integer and table work (like a
// TCG guest's: no instruction a CPU may accelerate) the calibration runs:
// about a tenth of a second of CPU on the reference host.
const calibrationSteps = 12_000_000

// Slowdown is how much slower than the reference host this one runs a
// CPU-bound job such as a TCG boot, and what it was measured from.
type Slowdown struct {
	// Factor multiplies a deadline written for the reference host; at least 1.
	Factor float64
	// Speed is the calibration work's CPU time over the reference host's (at
	// least 1: a faster CPU shortens no deadline).
	Speed float64
	// Contention is the calibration's wall time over its CPU time: time spent
	// runnable but waiting for a CPU that other processes held.
	Contention float64
	// Load is the 1-minute load average per CPU beyond one job per CPU (what
	// make test's -p 2 runs on the reference host), at least 1.
	Load float64
}

// String says the factor and what it came from, for a test's log.
func (s Slowdown) String() string {
	return fmt.Sprintf("host slowdown ×%.2f (CPU speed ×%.2f, CPU contention ×%.2f, load ×%.2f per CPU)", s.Factor, s.Speed, s.Contention, s.Load)
}

// combine makes a Slowdown of its three measures: speed times the larger of
// the measured contention and the load average's, bounded to [1, maxSlowdown].
// The contention seen by one short calibration and the minute's load average
// both say how much the CPUs are shared; the larger one is the safer.
func combine(speed, contention, load float64) Slowdown {
	clamp := func(f float64) float64 { return min(max(f, 1), maxSlowdown) }
	speed, contention, load = clamp(speed), clamp(contention), clamp(load)
	return Slowdown{Factor: clamp(speed * max(contention, load)), Speed: speed, Contention: contention, Load: load}
}

// scale stretches d, written for the reference host, by the slowdown.
func (s Slowdown) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * max(s.Factor, 1))
}

var (
	slowdownOnce sync.Once
	slowdown     Slowdown
)

// HostSlowdown measures once per test process (about a tenth of a second of
// hashing on one locked OS thread, read back through the thread's scheduler
// statistics) how much slower than the reference host this host runs
// CPU-bound work, and returns the same answer to every later call.
func HostSlowdown() Slowdown {
	slowdownOnce.Do(func() { slowdown = measureSlowdown() })
	return slowdown
}

// Deadline returns how long to give a step that takes at most idle on the
// reference host (a QEMU boot's Timeout, an image build's context): idle
// stretched by HostSlowdown, logged with the measure when it was stretched.
// The measure is taken again if the load average has since risen above it.
func Deadline(t testing.TB, idle time.Duration) time.Duration {
	t.Helper()
	s := HostSlowdown()
	if l, err := loadPerCPU(); err == nil {
		if now := combine(s.Speed, s.Contention, l); now.Factor > s.Factor {
			s = now
		}
	}
	d := s.scale(idle)
	if d != idle {
		t.Logf("deadline %s for %s on the reference host: %s", d.Round(time.Second), idle, s)
	}
	return d
}

// measureSlowdown runs the calibration work and reads the load average.
// Where the scheduler statistics cannot be read (not Linux), contention comes
// from the load average alone.
func measureSlowdown() Slowdown {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, errB := threadSchedstat()
	start := time.Now()
	calibrationSink = calibrationWork(calibrationSteps)
	wall := time.Since(start)
	after, errA := threadSchedstat()
	speed, contention := 1.0, 1.0
	if errB == nil && errA == nil {
		cpu := after.run - before.run
		if cpu > 0 {
			speed = float64(cpu) / float64(refWorkCPU)
			contention = float64(cpu+(after.wait-before.wait)) / float64(cpu)
		}
	} else {
		speed = float64(wall) / float64(refWorkCPU)
	}
	load, err := loadPerCPU()
	if err != nil {
		load = 1
	}
	return combine(speed, contention, load)
}

// calibrationSink keeps the compiler from dropping the calibration work.
var calibrationSink uint64

// calibrationWork runs n steps of xorshift and table updates (256 KiB: in a
// core's cache) and returns a value that depends on all of them.
func calibrationWork(n int) uint64 {
	var table [1 << 15]uint64
	x := uint64(88172645463325252)
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		i := x & (1<<15 - 1)
		table[i] += x
		x += table[(i*31)&(1<<15-1)]
	}
	return x
}

// schedstat is a thread's time on a CPU and time runnable but waiting for one.
type schedstat struct{ run, wait time.Duration }

// threadSchedstat reads /proc/thread-self/schedstat: nanoseconds on a CPU,
// nanoseconds waiting on a run queue, time slices.
func threadSchedstat() (schedstat, error) {
	b, err := os.ReadFile("/proc/thread-self/schedstat")
	if err != nil {
		return schedstat{}, err
	}
	return parseSchedstat(string(b))
}

// parseSchedstat parses schedstat's "RUN WAIT SLICES" line.
func parseSchedstat(s string) (schedstat, error) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return schedstat{}, fmt.Errorf("schedstat %q: want at least two fields", s)
	}
	run, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return schedstat{}, fmt.Errorf("schedstat run time %q: %w", f[0], err)
	}
	wait, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return schedstat{}, fmt.Errorf("schedstat wait time %q: %w", f[1], err)
	}
	return schedstat{run: time.Duration(run), wait: time.Duration(wait)}, nil
}

// loadPerCPU is /proc/loadavg's 1-minute average over the number of CPUs.
func loadPerCPU() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	return parseLoadPerCPU(string(b), runtime.NumCPU())
}

// parseLoadPerCPU divides loadavg's first field by ncpu.
func parseLoadPerCPU(s string, ncpu int) (float64, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, fmt.Errorf("loadavg %q: empty", s)
	}
	l, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("loadavg %q: %w", s, err)
	}
	return l / float64(max(ncpu, 1)), nil
}
