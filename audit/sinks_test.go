package audit_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/audit/audittest"
)

func TestMemoryReader(t *testing.T) { audittest.ExerciseReader(t, &audit.Memory{}) }

func TestJSONFileAppendsOneLinePerRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	f, err := audit.OpenJSONFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f.Write(ctx, audit.Record{Step: audit.StepReceived, Partner: "acme", MessageID: "m1"})
	f.Write(ctx, audit.Record{Step: audit.StepReply, Partner: "acme", MessageID: "m1", Disposition: "processed/error: unexpected-processing-error", Incident: "GW-7K3QX9"})
	f.Close()
	if err := f.Write(ctx, audit.Record{}); err == nil {
		t.Error("write after close succeeded")
	}
	fh, _ := os.Open(path)
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	var got []audit.Record
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if len(got) != 2 || got[1].Disposition != "processed/error: unexpected-processing-error" || got[1].Incident != "GW-7K3QX9" || got[0].Step != audit.StepReceived {
		t.Fatalf("records: %+v", got)
	}
}

type broken struct{}

func (broken) Write(context.Context, audit.Record) error { return errors.New("disk full") }

func TestMultiAndBestEffort(t *testing.T) {
	mem := &audit.Memory{}
	if err := (audit.Multi{mem, broken{}}).Write(context.Background(), audit.Record{}); err == nil {
		t.Error("multi hid a durable failure")
	}
	if len(mem.Records()) != 1 {
		t.Error("multi skipped a sink")
	}
	if err := (audit.Multi{}).Write(context.Background(), audit.Record{}); err != nil {
		t.Errorf("no sinks: %v", err)
	}
	be := audit.BestEffort(audit.Multi{broken{}}, slog.New(slog.DiscardHandler))
	if err := be.Write(context.Background(), audit.Record{}); err != nil || be.Failures() != 1 {
		t.Errorf("best effort: %v, failures %d", err, be.Failures())
	}
}

func TestJSONFileReader(t *testing.T) {
	f, err := audit.OpenJSONFile(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	audittest.ExerciseReader(t, f)
}

// rendezvous is a sink whose Write returns only once every sink of its
// group has started writing (or a second has passed: an error).
type rendezvous struct {
	started *sync.WaitGroup
	all     chan struct{}
}

func (r rendezvous) Write(context.Context, audit.Record) error {
	r.started.Done()
	select {
	case <-r.all:
		return nil
	case <-time.After(time.Second):
		return errors.New("the other sinks were not written meanwhile")
	}
}

// TestMultiWritesSinksTogether: Multi writes its sinks at the same time
// (durable sinks wait for their syncs together), and still joins every
// sink's error.
func TestMultiWritesSinksTogether(t *testing.T) {
	var started sync.WaitGroup
	started.Add(3)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	r := rendezvous{&started, all}
	if err := (audit.Multi{r, r, r}).Write(context.Background(), audit.Record{}); err != nil {
		t.Fatal(err)
	}
	mem := &audit.Memory{}
	err := (audit.Multi{broken{}, mem, broken{}}).Write(context.Background(), audit.Record{MessageID: "m"})
	if err == nil || len(mem.Records()) != 1 {
		t.Fatalf("err %v, %d records in the good sink", err, len(mem.Records()))
	}
}
