package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/admintoken"
	"github.com/keygate/keygate/audit"
	"github.com/keygate/keygate/keyops"
)

// adminTokens is the admin token store as the admin API needs it.
type adminTokens struct{ a *admintoken.Authenticator }

var _ adminapi.TokenAuthenticator = adminTokens{}

func (t adminTokens) Authenticate(ctx context.Context, token string) (adminapi.Principal, bool, error) {
	info, ok, err := t.a.Authenticate(ctx, token)
	if err != nil || !ok {
		return adminapi.Principal{}, false, err
	}
	return adminapi.Principal{ID: info.ID, Scopes: info.Scopes}, true, nil
}

// auditReader is the audit log as the admin API reads it.
type auditReader struct{ r audit.Reader }

var _ adminapi.AuditReader = auditReader{}

func (a auditReader) ReadAudit(ctx context.Context, q adminapi.AuditQuery) (adminapi.AuditPage, error) {
	evs, next, err := a.r.Events(ctx, audit.Query{Since: q.Since, Actor: q.Actor, Target: q.Target, Cursor: q.Cursor, Limit: q.Limit})
	if errors.Is(err, audit.ErrInvalidCursor) {
		return adminapi.AuditPage{}, fmt.Errorf("%w: %w", keyops.ErrInvalid, err)
	}
	if err != nil {
		return adminapi.AuditPage{}, err
	}
	if evs == nil {
		evs = []audit.Event{}
	}
	return adminapi.AuditPage{Items: evs, NextCursor: next}, nil
}

// adminTokenDeps fills the admin token store from the keystore
// backend's admin when deps leaves it out.
func (s *Server) adminTokenDeps(deps *Deps, store keyops.Store) error {
	if deps.AdminTokens == nil {
		lookup, ok := store.(admintoken.Lookup)
		if !ok {
			return errors.New("admin_api: the keystore backend keeps no admin tokens")
		}
		a, err := admintoken.NewAuthenticator(admintoken.AuthConfig{Store: lookup})
		if err != nil {
			return err
		}
		deps.AdminTokens = adminTokens{a}
	}
	return nil
}

// auditDeps fills the audit log (writer and reader) when deps leaves it
// out.
func (s *Server) auditDeps(deps *Deps) error {
	if deps.Auditor == nil || deps.Audit == nil {
		log, err := audit.Open(s.cfg.AuditConfig(s.redis))
		if err != nil {
			return err
		}
		s.closers = append(s.closers, log.Close)
		if deps.Auditor == nil {
			deps.Auditor = log
		}
		if deps.Audit == nil {
			deps.Audit = auditReader{log}
		}
	}
	return nil
}
