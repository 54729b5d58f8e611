package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"oras.land/oras-go/v2/registry/remote/retry"
)

// Defaults of Options' bounds.
const (
	// DefaultConnectTimeout bounds establishing a connection (TCP and TLS).
	DefaultConnectTimeout = 10 * time.Second
	// DefaultFirstByteTimeout bounds the wait for a response's header once
	// the request is sent.
	DefaultFirstByteTimeout = 30 * time.Second
	// DefaultIdleTimeout bounds a silence within a response's body.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultTimeout bounds one operation: a lookup, a listing, the pull or
	// the push of one cell.
	DefaultTimeout = 10 * time.Minute
	// DefaultMaxRedirects is how many redirects one request may follow.
	DefaultMaxRedirects = 5
	// DefaultMaxTagPages is how many pages of tags/list one listing may read.
	DefaultMaxTagPages = 1000
)

// ErrTimeout is wrapped by the error of a request or an operation that ran
// past one of its timeouts.
var ErrTimeout = errors.New("timed out")

// Timeouts bounds the calls to a registry; a zero field takes its default
// (DefaultConnectTimeout, DefaultFirstByteTimeout, DefaultIdleTimeout,
// DefaultTimeout).
type Timeouts struct {
	// Connect bounds establishing a connection, TCP and TLS handshake.
	Connect time.Duration
	// FirstByte bounds the wait for a response's header after the request
	// was sent.
	FirstByte time.Duration
	// Idle bounds a silence within a response's body: a read that gets no
	// byte for this long fails.
	Idle time.Duration
	// Total bounds one operation: Lookup, List, the pull (Pull, PullRecord)
	// or the push (PushSet, PushFailure) of one cell, retries included.
	Total time.Duration
}

// withDefaults fills the zero fields of t with the defaults.
func (t Timeouts) withDefaults() Timeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.Connect, DefaultConnectTimeout)
	def(&t.FirstByte, DefaultFirstByteTimeout)
	def(&t.Idle, DefaultIdleTimeout)
	def(&t.Total, DefaultTimeout)
	return t
}

// newHTTPClient returns the client every request to the registry goes
// through: net/http's transport with the connect and first-byte timeouts, a
// watch on idle bodies and on tags/list pages read twice, oras-go's retries
// (of 5xx, 429 and dropped connections, never of a timeout: the timeouts are
// already generous) and bounded redirects.
func newHTTPClient(t Timeouts, maxRedirects int) *http.Client {
	dialer := &net.Dialer{Timeout: t.Connect, KeepAlive: 30 * time.Second}
	base := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   t.Connect,
		ResponseHeaderTimeout: t.FirstByte,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          16,
		ForceAttemptHTTP2:     true,
	}
	policy := &retry.GenericPolicy{
		Retryable: retryable,
		Backoff:   retry.DefaultBackoff,
		MinWait:   200 * time.Millisecond,
		MaxWait:   3 * time.Second,
		MaxRetry:  5,
	}
	return &http.Client{
		Transport: &retry.Transport{
			Base:   &guardTransport{base: base, timeouts: t},
			Policy: func() retry.Policy { return policy },
		},
		CheckRedirect: checkRedirect(maxRedirects),
	}
}

// retryable is oras-go's retry predicate, except that a timeout is final.
func retryable(resp *http.Response, err error) (bool, error) {
	if errors.Is(err, ErrTimeout) || errors.Is(err, errPageRepeated) {
		return false, err
	}
	return retry.DefaultPredicate(resp, err)
}

// checkRedirect bounds the redirects of one request: at most max of them,
// never to another scheme (https to http), never back to a URL already
// visited. Another host or port is allowed, as registries send blob
// downloads to their storage; net/http drops the credentials for it.
func checkRedirect(max int) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		first := via[0].URL
		if len(via) > max {
			return fmt.Errorf("refused: more than %d redirects from %s (%w)", max, first.Redacted(), errRedirect)
		}
		if !strings.EqualFold(req.URL.Scheme, first.Scheme) {
			return fmt.Errorf("refused: %s redirects to %s, another scheme (%w)", first.Redacted(), req.URL.Redacted(), errRedirect)
		}
		for _, v := range via {
			if v.URL.String() == req.URL.String() {
				return fmt.Errorf("refused: redirect loop, %s leads back to %s (%w)", via[len(via)-1].URL.Redacted(), req.URL.Redacted(), errRedirect)
			}
		}
		return nil
	}
}

// errRedirect is wrapped by the errors of refused redirects.
var errRedirect = errors.New("bad redirect")

// guardTransport turns net/http's connect and first-byte timeouts into
// errors wrapping ErrTimeout, fails a body read that waits longer than the
// idle timeout, and refuses a tags/list page read twice in one listing.
type guardTransport struct {
	base     http.RoundTripper
	timeouts Timeouts
}

func (g *guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	resp, err := g.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel(nil)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && req.Context().Err() == nil {
			return nil, fmt.Errorf("%w (connect timeout %s, first-byte timeout %s): %w", ErrTimeout, g.timeouts.Connect, g.timeouts.FirstByte, err)
		}
		return nil, err
	}
	if pages := tagPagesOf(req.Context()); pages != nil && resp.StatusCode == http.StatusOK && strings.HasSuffix(req.URL.Path, "/tags/list") {
		if err := pages.read(req.URL.String()); err != nil {
			resp.Body.Close()
			cancel(nil)
			return nil, err
		}
	}
	idle := g.timeouts.Idle
	timer := time.AfterFunc(idle, func() {
		cancel(fmt.Errorf("%w: the registry sent nothing for %s (idle timeout)", ErrTimeout, idle))
	})
	timer.Stop() // armed only while a read waits
	resp.Body = &idleBody{body: resp.Body, ctx: ctx, cancel: cancel, idle: idle, timer: timer}
	return resp, nil
}

// idleBody is a response body whose reads fail once they wait longer than
// idle for a byte (by cancelling the request, which net/http turns into an
// error of the blocked read).
type idleBody struct {
	body   io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   time.Duration
	timer  *time.Timer
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.idle)
	n, err := b.body.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF {
		if cause := context.Cause(b.ctx); errors.Is(cause, ErrTimeout) {
			return n, fmt.Errorf("%w (%v)", cause, err)
		}
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.body.Close()
	b.cancel(nil)
	return err
}

// errPageRepeated is wrapped by the error of a tags/list page read twice.
var errPageRepeated = errors.New("tags/list page repeated")

// tagPages remembers the tags/list pages one listing read.
type tagPages struct {
	mu   sync.Mutex
	seen map[string]bool
}

// read records a page that was answered, or refuses one read before.
func (p *tagPages) read(url string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen[url] {
		return fmt.Errorf("refused: the registry's Link header leads back to %s, a page already read (%w)", url, errPageRepeated)
	}
	p.seen[url] = true
	return nil
}

type tagPagesKey struct{}

// withTagPages returns a context whose tags/list requests are checked for
// repeated pages.
func withTagPages(ctx context.Context) context.Context {
	return context.WithValue(ctx, tagPagesKey{}, &tagPages{seen: map[string]bool{}})
}

// tagPagesOf returns the page record of a listing's context, or nil.
func tagPagesOf(ctx context.Context) *tagPages {
	p, _ := ctx.Value(tagPagesKey{}).(*tagPages)
	return p
}
