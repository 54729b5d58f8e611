package testenv

import (
	"runtime"
	"testing"
	"time"
)

func TestCombine(t *testing.T) {
	tests := []struct {
		name                    string
		speed, contention, load float64
		want                    Slowdown
	}{
		{"idle reference host", 1, 1, 0.5, Slowdown{Factor: 1, Speed: 1, Contention: 1, Load: 1}},
		{"faster CPU shortens nothing", 0.4, 1, 0.1, Slowdown{Factor: 1, Speed: 1, Contention: 1, Load: 1}},
		{"shared CPU: contention", 1, 2.5, 1, Slowdown{Factor: 2.5, Speed: 1, Contention: 2.5, Load: 1}},
		{"shared CPU: load higher than the sample", 1, 1.2, 3, Slowdown{Factor: 3, Speed: 1, Contention: 1.2, Load: 3}},
		{"slower CPU and shared", 2, 1.5, 1, Slowdown{Factor: 3, Speed: 2, Contention: 1.5, Load: 1}},
		{"bounded", 4, 5, 9, Slowdown{Factor: maxSlowdown, Speed: 4, Contention: 5, Load: maxSlowdown}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := combine(tt.speed, tt.contention, tt.load); got != tt.want {
				t.Errorf("combine(%v, %v, %v) = %+v, want %+v", tt.speed, tt.contention, tt.load, got, tt.want)
			}
		})
	}
}

func TestSlowdownScale(t *testing.T) {
	tests := []struct {
		factor float64
		d      time.Duration
		want   time.Duration
	}{
		{1, 7 * time.Minute, 7 * time.Minute},
		{2.5, 2 * time.Minute, 5 * time.Minute},
		{0, time.Minute, time.Minute}, // a zero Slowdown never shortens
	}
	for _, tt := range tests {
		if got := (Slowdown{Factor: tt.factor}).scale(tt.d); got != tt.want {
			t.Errorf("Slowdown{Factor: %v}.scale(%s) = %s, want %s", tt.factor, tt.d, got, tt.want)
		}
	}
}

func TestParseSchedstat(t *testing.T) {
	got, err := parseSchedstat("5838102 12070531 3\n")
	if want := (schedstat{run: 5838102, wait: 12070531}); err != nil || got != want {
		t.Errorf("parseSchedstat = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{"", "12", "x 1 1", "1 y 1"} {
		if _, err := parseSchedstat(bad); err == nil {
			t.Errorf("parseSchedstat(%q): no error", bad)
		}
	}
}

func TestParseLoadPerCPU(t *testing.T) {
	got, err := parseLoadPerCPU("10.62 9.98 7.77 16/189 25358\n", 2)
	if err != nil || got != 5.31 {
		t.Errorf("parseLoadPerCPU = %v, %v; want 5.31", got, err)
	}
	for _, bad := range []string{"", "load 1 1"} {
		if _, err := parseLoadPerCPU(bad, 2); err == nil {
			t.Errorf("parseLoadPerCPU(%q): no error", bad)
		}
	}
}

// TestHostSlowdown measures this host for real: once, the same answer on
// every call, never below 1 nor above the bound, and Deadline never shorter
// than what it was given.
func TestHostSlowdown(t *testing.T) {
	first := HostSlowdown()
	t.Log(first)
	if first.Factor < 1 || first.Factor > maxSlowdown {
		t.Errorf("factor %v, want within [1, %d]", first.Factor, maxSlowdown)
	}
	if again := HostSlowdown(); again != first {
		t.Errorf("second HostSlowdown = %+v, want the first %+v (measured once per process)", again, first)
	}
	idle := 3 * time.Minute
	if d := Deadline(t, idle); d < first.scale(idle) || d > time.Duration(maxSlowdown)*idle {
		t.Errorf("Deadline(%s) = %s, want within [%s, %s]", idle, d, first.scale(idle), time.Duration(maxSlowdown)*idle)
	}
}

// TestCalibrationMeasuresCPU: the calibration work takes CPU time in
// proportion to its steps, so that a slower CPU shows as a larger Speed.
func TestCalibrationMeasuresCPU(t *testing.T) {
	if _, err := threadSchedstat(); err != nil {
		t.Fatalf("scheduler statistics: %v (Linux with schedstats is what the VM tests run on)", err)
	}
	cpu := func(n int) time.Duration {
		b, _ := threadSchedstat()
		calibrationSink = calibrationWork(n)
		a, _ := threadSchedstat()
		return a.run - b.run
	}
	// The OS thread stays locked for both, so the thread's counters are this work's.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	small, large := cpu(calibrationSteps/4), cpu(calibrationSteps)
	if large < 2*small {
		t.Errorf("CPU time of %d steps %s, of %d steps %s: want the larger at least twice the smaller", calibrationSteps/4, small, calibrationSteps, large)
	}
}
