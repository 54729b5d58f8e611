package clirun

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Context is cmd's context, which Execute's signals cancel, or a background
// one when cmd runs outside Execute.
func Context(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// SignalContext is the context of a command that talks to a registry: it
// ends on SIGINT and SIGTERM, so the command returns through its cleanups
// (a pull removes its temporary directory) instead of dying midway.
func SignalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(Context(cmd), os.Interrupt, syscall.SIGTERM)
}
