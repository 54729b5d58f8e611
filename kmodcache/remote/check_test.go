package remote

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/kmodcache/remote/remotetest"
)

// TestCheck: Check answers within DefaultCheckTimeout (and a second) for a
// registry that is there, one refusing connections, one that never answers,
// one that asks for credentials it is not given (401) and one that may be read
// but not written (403 on the upload); a push check without a signing key
// contacts nothing.
func TestCheck(t *testing.T) {
	s, _ := keys(t, "team")
	reg := remotetest.Start(t)

	// A closed port: a listener closed at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	var mu sync.Mutex
	var asked []string
	unauthorized := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("WWW-Authenticate", `Basic realm="kpreload-test"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(unauthorized.Close)
	readOnly := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(readOnly.Close)
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

	for _, tt := range []struct {
		name, addr string
		push       bool
		want       string // "" for no error
	}{
		{"there", reg.Addr(), true, ""},
		{"there, read", reg.Addr(), false, ""},
		{"closed port", closed, true, "read: Head \"http://" + closed + "/v2/" + remotetest.Repo + "/manifests/kpreload-check\": dial tcp " + closed + ": connect: connection refused"},
		{"silent", remotetest.Silent(t), true, "no answer within 4s"},
		{"401", host(unauthorized), true, "read: HEAD \"http://" + host(unauthorized) + "/v2/" + remotetest.Repo + "/manifests/kpreload-check\": basic credential not found (the registry wants credentials that may read: docker login " + host(unauthorized) + ", or oras login, writes them to the Docker config)"},
		{"403 on push", host(readOnly), true, "push: POST \"http://" + host(readOnly) + "/v2/" + remotetest.Repo + "/blobs/uploads/\": response status code 403: Forbidden (the registry wants credentials that may push"},
		{"403 not checked", host(readOnly), false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Open("oci://"+tt.addr+"/"+remotetest.Repo, Options{PlainHTTP: true, Signer: s})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = r.Check(context.Background(), tt.push)
			took := time.Since(start)
			if took > DefaultCheckTimeout+time.Second {
				t.Errorf("Check took %s", took)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Check: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "registry oci://"+tt.addr+"/")):
				t.Errorf("Check: %v, want an error naming the registry and containing %q", err, tt.want)
			}
		})
	}
	if len(asked) == 0 {
		t.Error("the 401 registry was never asked")
	}

	// No signing key: refused before anything is asked.
	mu.Lock()
	asked = nil
	mu.Unlock()
	r, err := Open("oci://"+host(unauthorized)+"/"+remotetest.Repo, Options{PlainHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(context.Background(), true); err == nil || !strings.Contains(err.Error(), "no signing key") || len(asked) != 0 {
		t.Errorf("Check without a signer: %v, requests %q", err, asked)
	}
}
