package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"runtime"
	"testing"
)

// TestProcsSettings: serve runs twice Go's default schedulers (at most
// serveExtraProcs more) unless the environment sets GOMAXPROCS.
func TestProcsSettings(t *testing.T) {
	none := func(string) string { return "" }
	for def, want := range map[int]int{1: 2, 2: 4, 4: 8, 8: 16, 16: 24, 64: 72} {
		if p, ok := procsSettings(def, none); !ok || p != want {
			t.Errorf("%d CPUs: %d %v, want %d", def, p, ok, want)
		}
	}
	set := func(k string) string {
		if k == "GOMAXPROCS" {
			return "3"
		}
		return ""
	}
	if p, ok := procsSettings(2, set); ok {
		t.Errorf("GOMAXPROCS in the environment: tuned to %d", p)
	}
}

// TestTuneProcsApplies: tuneProcs sets the runtime's GOMAXPROCS and logs
// it; with GOMAXPROCS in the environment it leaves it alone.
func TestTuneProcsApplies(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	var logs bytes.Buffer
	tuneProcs(func(string) string { return "" }, slog.New(slog.NewJSONHandler(&logs, nil)))
	want, _ := procsSettings(before, func(string) string { return "" })
	if got := runtime.GOMAXPROCS(0); got != want {
		t.Fatalf("GOMAXPROCS %d after tuneProcs, want %d", got, want)
	}
	var line struct {
		GOMAXPROCS int `json:"gomaxprocs"`
		CPUs       int `json:"cpus"`
	}
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil || line.GOMAXPROCS != want || line.CPUs != before {
		t.Fatalf("log %q: %+v %v", logs.String(), line, err)
	}
	runtime.GOMAXPROCS(before)
	logs.Reset()
	tuneProcs(func(k string) string {
		if k == "GOMAXPROCS" {
			return "1"
		}
		return ""
	}, slog.New(slog.NewJSONHandler(&logs, nil)))
	if got := runtime.GOMAXPROCS(0); got != before || logs.Len() != 0 {
		t.Fatalf("with GOMAXPROCS set: %d (want %d), log %q", got, before, logs.String())
	}
}
