package keystore

import (
	"context"
	"time"
)

// Admin is the write side both stores offer: FileAdmin and RedisAdmin.
// Each method is one atomic change, or one consistent read. Package keyops
// builds its operations (audit, limits, usage) on it.
type Admin interface {
	Issue(ctx context.Context, req IssueRequest) (string, Record, error)
	List(ctx context.Context) ([]Record, error)
	Revoke(ctx context.Context, id string) (Record, error)
	Rotate(ctx context.Context, id string, grace time.Duration) (string, Record, error)
	UpdateKey(ctx context.Context, id string, f func(Record) (Record, error)) (Record, error)
	CreateConsumer(ctx context.Context, c Consumer) error
	ListConsumers(ctx context.Context) ([]Consumer, error)
	GetConsumer(ctx context.Context, id string) (Consumer, error)
	UpdateConsumer(ctx context.Context, id string, f func(Consumer) (Consumer, error)) (Consumer, error)
	DeleteConsumer(ctx context.Context, id string) (Consumer, error)
}

var (
	_ Admin = (*FileAdmin)(nil)
	_ Admin = (*RedisAdmin)(nil)
)
