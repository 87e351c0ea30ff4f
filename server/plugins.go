package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminpb "github.com/tinybroker/tinybroker/proto/tinybroker/admin/v1"
)

// PluginLifecycle backs the admin service's plugin RPCs (Options.PluginLifecycle). It is an
// interface because the server does not own the plugins: the program that loads them (and
// the store that keeps the deployed ones) does, and answers in the admin protocol's terms.
type PluginLifecycle interface {
	DeployPlugin(context.Context, *adminpb.DeployPluginRequest) (*adminpb.DeployPluginResponse, error)
	ListPlugins(context.Context, *adminpb.ListPluginsRequest) (*adminpb.ListPluginsResponse, error)
	PausePlugin(context.Context, *adminpb.PluginRequest) (*adminpb.PluginResponse, error)
	ResumePlugin(context.Context, *adminpb.PluginRequest) (*adminpb.PluginResponse, error)
	RollbackPlugin(context.Context, *adminpb.PluginRequest) (*adminpb.PluginResponse, error)
	RemovePlugin(context.Context, *adminpb.PluginRequest) (*adminpb.PluginResponse, error)
	PromotePlugin(context.Context, *adminpb.PluginRequest) (*adminpb.PluginResponse, error)
}

// lifecycle returns the plugin lifecycle, or UNIMPLEMENTED when the server has none.
func (a *adminServer) lifecycle() (PluginLifecycle, error) {
	if a.s.opts.PluginLifecycle == nil {
		return nil, status.Error(codes.Unimplemented, "this broker does not deploy plugins")
	}
	return a.s.opts.PluginLifecycle, nil
}

// onLifecycle calls do on the lifecycle, its error answered as a status.
func onLifecycle[Req, Resp any](a *adminServer, ctx context.Context, req Req, do func(PluginLifecycle, context.Context, Req) (Resp, error)) (Resp, error) {
	var none Resp
	l, err := a.lifecycle()
	if err != nil {
		return none, err
	}
	resp, err := do(l, ctx, req)
	if err != nil {
		return none, toStatus(err)
	}
	return resp, nil
}

func (a *adminServer) DeployPlugin(ctx context.Context, req *adminpb.DeployPluginRequest) (*adminpb.DeployPluginResponse, error) {
	return onLifecycle(a, ctx, req, PluginLifecycle.DeployPlugin)
}

func (a *adminServer) ListPlugins(ctx context.Context, req *adminpb.ListPluginsRequest) (*adminpb.ListPluginsResponse, error) {
	return onLifecycle(a, ctx, req, PluginLifecycle.ListPlugins)
}

func (a *adminServer) PausePlugin(ctx context.Context, req *adminpb.PluginRequest) (*adminpb.PluginResponse, error) {
	return onLifecycle(a, ctx, req, PluginLifecycle.PausePlugin)
}

func (a *adminServer) ResumePlugin(ctx context.Context, req *adminpb.PluginRequest) (*adminpb.PluginResponse, error) {
	return onLifecycle(a, ctx, req, PluginLifecycle.ResumePlugin)
}

func (a *adminServer) RollbackPlugin(ctx context.Context, req *adminpb.PluginRequest) (*adminpb.PluginResponse, error) {
	return onLifecycle(a, ctx, req, PluginLifecycle.RollbackPlugin)
}

func (a *adminServer) RemovePlugin(ctx context.Context, req *adminpb.PluginRequest) (*adminpb.PluginResponse, error) {
	return onLifecycle(a, ctx, req, PluginLifecycle.RemovePlugin)
}

func (a *adminServer) PromotePlugin(ctx context.Context, req *adminpb.PluginRequest) (*adminpb.PluginResponse, error) {
	return onLifecycle(a, ctx, req, PluginLifecycle.PromotePlugin)
}
