package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/cmd/tinybroker/config"
	"github.com/tinybroker/tinybroker/ops"
	"github.com/tinybroker/tinybroker/plugins"
	"github.com/tinybroker/tinybroker/server"
	"github.com/tinybroker/tinybroker/server/auth"
)

// startOps starts the ops HTTP listener if cfg turns it on. stop shuts it down (a no-op when
// off), giving requests in progress (a CPU profile, say) up to 5 seconds, and waits for its
// goroutines; addr is where it listens (nil when off).
//
// With users (guard enabled) the listener is behind the same authentication as the gRPC API:
// every request needs an admin user's token (Bearer or Basic) or client certificate, and it
// may listen beyond loopback; with TLS it serves the broker's certificate.
func startOps(cfg config.HTTP, b broker.Engine, srv *server.Server, pm *pluginManager, guard *auth.Authenticator, log hclog.Logger) (stop func(), addr net.Addr, err error) {
	if cfg.Listen == "" {
		return func() {}, nil, nil
	}
	lis, err := ops.Listen(cfg.Listen, cfg.AllowRemote || guard.Enabled())
	if err != nil {
		return nil, nil, err
	}
	if tc := guard.TLSConfig(); tc != nil {
		lis = tls.NewListener(lis, tc)
	}
	bv := buildVersion()
	opts := ops.Options{Engine: b, Server: srv, Plugins: pm.metrics, AllowRemote: cfg.AllowRemote,
		MaxGroupSeries: cfg.MetricsMaxGroups, StuckAfter: cfg.StuckAfter, Logger: log, Version: bv.Version, Commit: bv.Commit}
	if guard.Enabled() {
		opts.Authenticate = func(r *http.Request) error {
			c, err := guard.HTTP(r)
			if err != nil {
				return err
			}
			return c.Admin("the HTTP listener (metrics, dashboard, pprof)")
		}
	}
	o := ops.New(opts)
	served := make(chan error, 1) // the stop function receives from it: the wait for Serve
	var serving sync.WaitGroup
	serving.Go(func() { served <- o.Serve(lis) })
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := o.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			log.Warn("http shutdown", "error", err)
		}
		if err := <-served; err != nil {
			log.Error("http listener failed", "error", fmt.Sprint(err))
		}
	}, lis.Addr(), nil
}

// metrics reports the current chain's plugin metrics.
func (pm *pluginManager) metrics() []plugins.PluginMetrics {
	if c := pm.current(); c != nil {
		return c.Metrics()
	}
	return nil
}
