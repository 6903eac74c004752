package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"

	"gateway/config"
	"gateway/exchange"
	"gateway/server"
)

// A program that embeds the gateway with its own business handler: every
// new message is accepted exactly once; retransmissions of accepted messages
// and resent interchanges are answered by the gateway without calling it.
// Handle runs at least once per accepted key (again after a crash between
// its side effect and the accept): key its side effects on
// Message.IdempotencyKey / Payload.IdempotencyKey to make them exactly once.
func Example_embedding() {
	cfg, err := config.Load("gateway.yaml")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	srv, err := server.New(ctx, cfg, slog.Default())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer srv.Close()
	srv.SetHandler(exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
		for _, p := range m.Payloads {
			r, err := p.Open()
			if err != nil {
				return err
			}
			n, err := io.Copy(io.Discard, r) // post to the ERP here
			r.Close()
			if err != nil {
				return err // the partner gets a negative reply and retransmits
			}
			slog.Info("invoice booked", "partner", m.Partner, "message_id", m.MessageID, "bytes", n)
		}
		return nil
	}))
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	_ = srv.Serve(ctx, ln)
}
