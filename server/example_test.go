package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/server"
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

// A program whose handler's data lives in the gateway's own database (store:
// sqlite:… or postgres://…): HandleTx writes in the transaction that accepts
// the message, so the rows commit if and only if the message is accepted —
// exactly once across crashes, without an idempotency check. The table
// (here erp_inbox) is the application's; create it with its own migrations.
// The transaction is open while HandleTx runs: keep it to a few statements.
func Example_transactionalHandler() {
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
	err = srv.SetTxHandler(exchange.TxHandlerFunc(func(ctx context.Context, tx exchange.Tx, m *exchange.Message) error {
		for _, p := range m.Payloads {
			var err error
			if t := tx.SQLTx(); t != nil { // SQLite
				_, err = t.ExecContext(ctx, `INSERT INTO erp_inbox (doc_key, partner, message_id, sha256) VALUES (?, ?, ?, ?)`,
					p.IdempotencyKey, m.Partner, m.MessageID, p.SHA256)
			} else { // PostgreSQL
				_, err = tx.PgxTx().Exec(ctx, `INSERT INTO erp_inbox (doc_key, partner, message_id, sha256) VALUES ($1, $2, $3, $4)`,
					p.IdempotencyKey, m.Partner, m.MessageID, p.SHA256)
			}
			if err != nil {
				return err // rolled back with the accept; the partner gets a negative reply and retransmits
			}
		}
		return nil
	}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // memory: store
		return
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	_ = srv.Serve(ctx, ln)
}
