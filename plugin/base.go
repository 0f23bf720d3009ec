package plugin

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/zclconf/go-cty/cty"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/impact-sched/nomad-impact/plugin/config"
	"github.com/impact-sched/nomad-impact/plugin/proto/basepb"
)

// baseServer serves BasePlugin for a Base implementation.
type baseServer struct {
	basepb.UnimplementedBasePluginServer
	kind   Kind
	impl   Base
	logger hclog.Logger
}

// NewBaseServer returns the BasePlugin service for impl as a plugin of the
// given kind. ServeDevice/ServeDriver use it; it is exported for tests that
// call the service without go-plugin.
func NewBaseServer(kind Kind, impl Base, logger hclog.Logger) basepb.BasePluginServer {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &baseServer{kind: kind, impl: impl, logger: logger.Named("base")}
}

func (s *baseServer) PluginInfo(context.Context, *basepb.PluginInfoRequest) (*basepb.PluginInfoResponse, error) {
	info := s.impl.PluginInfo()
	if err := info.Validate(); err != nil {
		// Nomad would refuse the plugin anyway; say why in its log.
		return nil, status.Errorf(codes.Internal, "invalid plugin info: %v", err)
	}
	return &basepb.PluginInfoResponse{
		Type:              s.kind.PluginType(),
		PluginApiVersions: info.apiVersions(),
		PluginVersion:     info.Version,
		Name:              info.Name,
	}, nil
}

func (s *baseServer) ConfigSchema(context.Context, *basepb.ConfigSchemaRequest) (*basepb.ConfigSchemaResponse, error) {
	return &basepb.ConfigSchemaResponse{Spec: s.impl.ConfigSchema()}, nil
}

func (s *baseServer) SetConfig(ctx context.Context, req *basepb.SetConfigRequest) (*basepb.SetConfigResponse, error) {
	val, err := decodePluginConfig(s.impl, req.GetMsgpackConfig())
	if err != nil {
		s.logger.Error("rejecting plugin config", "error", err)
		return nil, withCode(err, codes.InvalidArgument)
	}
	cfg := &Config{Value: val, Nomad: req.GetNomadConfig(), APIVersion: req.GetPluginApiVersion()}
	if err := s.impl.SetConfig(ctx, cfg); err != nil {
		s.logger.Error("plugin rejected its config", "error", err)
		return nil, withCode(err, codes.InvalidArgument)
	}
	return &basepb.SetConfigResponse{}, nil
}

// withCode returns err as a gRPC status error: as it is when it already
// carries a status, else with the given code.
func withCode(err error, code codes.Code) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(code, err.Error())
}

// decodePluginConfig decodes SetConfig's bytes against the plugin's schema.
// Bad bytes are the client's fault (plain errors, InvalidArgument); a
// schema that does not convert is the plugin's own (Internal).
func decodePluginConfig(impl Base, data []byte) (cty.Value, error) {
	spec := impl.ConfigSchema()
	if spec == nil {
		if len(data) > 0 {
			return cty.NilVal, fmt.Errorf("plugin takes no configuration but received %d bytes of it", len(data))
		}
		return cty.EmptyObjectVal, nil
	}
	dec, err := config.NewDecoder(spec)
	if err != nil {
		return cty.NilVal, status.Errorf(codes.Internal, "plugin's own config schema is invalid: %v", err)
	}
	return dec.Value(data)
}
