package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// DefaultCheckTimeout bounds Check: a registry that answers at all answers a
// request with no body in well under this.
const DefaultCheckTimeout = 4 * time.Second

// checkTag is the tag Check resolves: no cell is tagged so (cell tags are
// their keys' digests), so a registry that can be read answers "not found".
const checkTag = "kpreload-check"

// Check reaches the registry before any work that needs it, within
// DefaultCheckTimeout: it resolves a tag no cell has in the repository (the
// registry answers, and the credentials, if any, may read it; a repository
// that does not exist yet is no error), and with push it also opens a blob
// upload with push credentials and cancels it at once (the credentials may
// write; nothing is stored). A cell push asks for a signing key:
// with push, a Remote opened without Options.Signer is refused before
// anything is contacted. The error names the registry and says which step
// failed: a refused connection, a timeout, a 401 or 403.
func (r *Remote) Check(ctx context.Context, push bool) error {
	if push && r.signer == nil {
		return fmt.Errorf("registry %s: cells pushed are signed: no signing key given", r.url)
	}
	cause := fmt.Errorf("%w: no answer within %s", ErrTimeout, DefaultCheckTimeout)
	ctx, cancel := context.WithTimeoutCause(ctx, DefaultCheckTimeout, cause)
	defer cancel()
	fail := func(step string, err error) error {
		if context.Cause(ctx) == cause && !errors.Is(err, ErrTimeout) {
			err = fmt.Errorf("%w (%w)", err, cause)
		}
		var er *errcode.ErrorResponse
		if errors.Is(err, auth.ErrBasicCredentialNotFound) || (errors.As(err, &er) && (er.StatusCode == http.StatusUnauthorized || er.StatusCode == http.StatusForbidden)) {
			err = fmt.Errorf("%w (the registry wants credentials that may %s: docker login %s, or oras login, writes them to the Docker config)", err, step, r.repo.Reference.Host())
		}
		return fmt.Errorf("registry %s: %s: %w", r.url, step, err)
	}
	if _, err := r.repo.Resolve(ctx, checkTag); err != nil && !errors.Is(err, errdef.ErrNotFound) {
		return fail("read", err)
	}
	if !push {
		return nil
	}
	ref := r.repo.Reference
	ctx = auth.AppendRepositoryScope(ctx, ref, auth.ActionPull, auth.ActionPush)
	scheme := "https"
	if r.repo.PlainHTTP {
		scheme = "http"
	}
	u := fmt.Sprintf("%s://%s/v2/%s/blobs/uploads/", scheme, ref.Host(), ref.Repository)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return fail("push", err)
	}
	resp, err := r.repo.Client.Do(req)
	if err != nil {
		return fail("push", err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fail("push", &errcode.ErrorResponse{Method: req.Method, URL: req.URL, StatusCode: resp.StatusCode})
	}
	// Cancel the upload; a registry that keeps it drops it on its own.
	if loc, err := resp.Location(); err == nil {
		if req, err := http.NewRequestWithContext(ctx, http.MethodDelete, loc.String(), nil); err == nil {
			if resp, err := r.repo.Client.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
	return nil
}
