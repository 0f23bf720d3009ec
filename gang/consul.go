package gang

import (
	"context"
	"fmt"
	"net"
	"strconv"

	consul "github.com/hashicorp/consul/api"
)

// ConsulResolver finds the rendezvous server through Consul: the passing
// instances of service (the impact agent registers "impact-scheduler"),
// restricted to tag when set ("leader": the registry lives in the leading
// agent). The address is http://<service address or node address>:<port>.
func ConsulResolver(addr, token, service, tag string) (func(context.Context) (string, error), error) {
	cfg := consul.DefaultConfig()
	if addr != "" {
		cfg.Address = addr
	}
	if token != "" {
		cfg.Token = token
	}
	client, err := consul.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul client for %s: %w", cfg.Address, err)
	}
	return func(ctx context.Context) (string, error) {
		entries, _, err := client.Health().Service(service, tag, true, (&consul.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return "", fmt.Errorf("consul: service %s: %w", service, err)
		}
		for _, e := range entries {
			if e.Service == nil || e.Service.Port <= 0 {
				continue
			}
			host := e.Service.Address
			if host == "" && e.Node != nil {
				host = e.Node.Address
			}
			if host == "" {
				continue
			}
			return "http://" + net.JoinHostPort(host, strconv.Itoa(e.Service.Port)), nil
		}
		if tag != "" {
			return "", fmt.Errorf("consul: no passing instance of service %s with tag %s", service, tag)
		}
		return "", fmt.Errorf("consul: no passing instance of service %s", service)
	}, nil
}
