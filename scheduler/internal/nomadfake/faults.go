package nomadfake

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/hashicorp/nomad/api"
)

// hang holds matching requests until released (or the client gives up),
// like an agent that accepted a connection and then stalled.
type hang struct {
	method, pathPrefix, query string
	release                   chan struct{}
}

type failure struct {
	method, pathPrefix string
	status             int
	body               string
}

// afterHook runs fn once after the first request that matches (AfterNext).
type afterHook struct {
	method, pathPrefix, bodyContains string
	fn                               func()
}

func (h afterHook) matches(r *http.Request, body []byte) bool {
	return (h.method == "" || h.method == r.Method) && strings.HasPrefix(r.URL.Path, h.pathPrefix) &&
		bytes.Contains(body, []byte(h.bodyContains))
}

// FailNext makes the next request whose method matches (empty: any) and
// whose path starts with pathPrefix answer status with body.
func (s *Server) FailNext(method, pathPrefix string, status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = append(s.failNext, failure{method: method, pathPrefix: pathPrefix, status: status, body: body})
}

// FailAfterNext makes the next request whose method matches (empty: any)
// and whose path starts with pathPrefix take effect, then answer status
// with body, as when the response to a write is lost on the way back.
func (s *Server) FailAfterNext(method, pathPrefix string, status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failAfter = append(s.failAfter, failure{method: method, pathPrefix: pathPrefix, status: status, body: body})
}

// AfterNext runs fn once, right after the fake has carried out the next
// successful request whose method matches (empty: any), whose path starts
// with pathPrefix and whose body contains bodyContains, and before it
// answers. A test stands for a process that dies just after a write with
// fn cancelling the client's context: the write is done, its answer lost,
// and nothing the client does afterwards reaches Nomad.
func (s *Server) AfterNext(method, pathPrefix, bodyContains string, fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.afterNext = append(s.afterNext, afterHook{method: method, pathPrefix: pathPrefix, bodyContains: bodyContains, fn: fn})
}

// FailNextOnceLost queues a FailNext that is armed only when the next
// FailAfterNext fires: the request after a lost response fails too (the
// connection is still down), while earlier requests go through.
func (s *Server) FailNextOnceLost(method, pathPrefix string, status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = append(s.armed, failure{method: method, pathPrefix: pathPrefix, status: status, body: body})
}

// Hang makes every request whose method matches (empty: any), whose path
// starts with pathPrefix and whose raw query contains query stall until
// the returned release is called or the client cancels; a released
// request answers 503.
func (s *Server) Hang(method, pathPrefix, query string) (release func()) {
	h := hang{method: method, pathPrefix: pathPrefix, query: query, release: make(chan struct{})}
	s.mu.Lock()
	s.hangs = append(s.hangs, h)
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			for i := range s.hangs {
				if s.hangs[i].release == h.release {
					s.hangs = append(s.hangs[:i], s.hangs[i+1:]...)
					break
				}
			}
			s.mu.Unlock()
			close(h.release)
		})
	}
}

// DropStreams ends every open event stream abruptly (as a network cut or
// an agent restart would). Clients must reconnect.
func (s *Server) DropStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ch := range s.streams {
		close(ch)
		delete(s.streams, id)
	}
}

// Restart simulates a dev agent restart: every stream drops, all state is
// lost and the index starts again from a low value. Nodes given in keep
// re-register (as clients do after a restart).
func (s *Server) Restart(keep ...*api.Node) {
	s.DropStreams()
	s.mu.Lock()
	s.epoch++
	s.reset(1)
	s.mu.Unlock()
	for _, n := range keep {
		s.UpsertNode(n)
	}
}

// injected records the request and answers it with an injected failure
// (FailNext) or hang (Hang) if one matches; false: serve it.
func (s *Server) injected(w http.ResponseWriter, r *http.Request) bool {
	s.mu.Lock()
	s.requests = append(s.requests, RequestRecord{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery})
	for i, f := range s.failNext {
		if (f.method == "" || f.method == r.Method) && strings.HasPrefix(r.URL.Path, f.pathPrefix) {
			s.failNext = append(s.failNext[:i], s.failNext[i+1:]...)
			s.mu.Unlock()
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(f.status)
			_, _ = io.WriteString(w, f.body)
			return true
		}
	}
	for _, h := range s.hangs {
		if (h.method == "" || h.method == r.Method) && strings.HasPrefix(r.URL.Path, h.pathPrefix) && strings.Contains(r.URL.RawQuery, h.query) {
			s.mu.Unlock()
			select {
			case <-h.release:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
	}
	s.mu.Unlock()
	return false
}

// lostAnswer is the error a FailAfterNext matching the (served) request
// answers instead, arming the FailNextOnceLost failures; nil if none.
func (s *Server) lostAnswer(r *http.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.failAfter {
		if (f.method == "" || f.method == r.Method) && strings.HasPrefix(r.URL.Path, f.pathPrefix) {
			s.failAfter = append(s.failAfter[:i], s.failAfter[i+1:]...)
			s.failNext = append(s.failNext, s.armed...)
			s.armed = nil
			return &httpError{status: f.status, msg: f.body}
		}
	}
	return nil
}

// runAfterHook runs (and drops) the first AfterNext hook the request
// matches, outside the lock.
func (s *Server) runAfterHook(r *http.Request, body []byte) {
	s.mu.Lock()
	var fn func()
	for i, h := range s.afterNext {
		if h.matches(r, body) {
			fn = h.fn
			s.afterNext = append(s.afterNext[:i], s.afterNext[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	if fn != nil {
		fn()
	}
}
