package gang

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkRendezvous forms gangs of 64 and 256 members over HTTP, every
// member running the full barrier (join, blocking watch, heartbeats).
func BenchmarkRendezvous(b *testing.B) {
	for _, n := range []int{64, 256} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			s, err := StartServer("127.0.0.1:0", RegistryConfig{}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			c, _ := NewClient(s.URL, nil)
			for i := 0; i < b.N; i++ {
				gangID := fmt.Sprintf("bench-%d", i)
				var wg sync.WaitGroup
				errs := make(chan error, n)
				for m := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						j := join(m, fmt.Sprint(m/8), n)
						_, err := c.Barrier(context.Background(), BarrierConfig{Gang: gangID, Member: fmt.Sprint(m), Join: j,
							Timeout: time.Minute, Heartbeat: 10 * time.Second})
						if err != nil {
							errs <- err
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			}
		})
	}
}
