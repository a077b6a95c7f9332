package keystore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/keystore"
)

// adminStore is the write side both stores offer, as these tests drive
// it (package keyops declares what it uses).
type adminStore interface {
	Issue(ctx context.Context, req keystore.IssueRequest) (string, keystore.Record, error)
	List(ctx context.Context) ([]keystore.Record, error)
	ListMatching(ctx context.Context, keep func(keystore.Record) bool) ([]keystore.Record, error)
	Get(ctx context.Context, id string) (keystore.Record, error)
	GetHashes(ctx context.Context, hs []keystore.Hash) ([]keystore.Record, error)
	Count(ctx context.Context) (int, error)
	Revoke(ctx context.Context, id string) (keystore.Record, error)
	Rotate(ctx context.Context, id string, grace time.Duration) (string, keystore.Record, error)
	UpdateKey(ctx context.Context, id string, f func(keystore.Record) (keystore.Record, error)) (keystore.Record, error)
	CreateConsumer(ctx context.Context, c keystore.Consumer) error
	ListConsumers(ctx context.Context) ([]keystore.Consumer, error)
	GetConsumer(ctx context.Context, id string) (keystore.Consumer, error)
	GetConsumers(ctx context.Context, ids []string) ([]keystore.Consumer, error)
	UpdateConsumer(ctx context.Context, id string, f func(keystore.Consumer) (keystore.Consumer, error)) (keystore.Consumer, error)
	DeleteConsumer(ctx context.Context, id string) (keystore.Consumer, error)
}

var (
	_ adminStore = (*keystore.FileAdmin)(nil)
	_ adminStore = (*keystore.RedisAdmin)(nil)
)

// TestAdminReadsOnEveryBackend: the reads by id, by hash, by filter, the
// count and the consumers by id answer the same on the file keystore
// (a read of the file) as on Redis: what List has, a missing id or hash
// left out (or ErrNotFound for Get), consumers in the order asked.
func TestAdminReadsOnEveryBackend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := redistest.Start(t)
	for name, a := range map[string]adminStore{
		"file":  &keystore.FileAdmin{Path: filepath.Join(t.TempDir(), "keys.yaml")},
		"redis": &keystore.RedisAdmin{Client: redisClient(t, rs.Addr)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var cons []keystore.Consumer
			for i := range 3 {
				c, err := keystore.NewConsumer(keystore.Consumer{Name: fmt.Sprint("customer ", i)}, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				if err := a.CreateConsumer(ctx, c); err != nil {
					t.Fatal(err)
				}
				cons = append(cons, c)
			}
			for i := range 6 {
				req := keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Live, Name: fmt.Sprint("k", i%2)}
				if i < 2 {
					req.Consumer = cons[1].ID
				}
				if _, _, err := a.Issue(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			all, err := a.List(ctx)
			if err != nil || len(all) != 6 {
				t.Fatalf("List: %d, %v", len(all), err)
			}
			if n, err := a.Count(ctx); err != nil || n != len(all) {
				t.Errorf("Count = %d, %v; want %d", n, err, len(all))
			}
			got, err := a.Get(ctx, all[4].ID)
			if err != nil || !reflect.DeepEqual(got, all[4]) {
				t.Errorf("Get = %+v, %v\nwant %+v", got, err, all[4])
			}
			if _, err := a.Get(ctx, "key_0000000000000000"); !errors.Is(err, keystore.ErrNotFound) {
				t.Errorf("Get of an unknown id: %v, want ErrNotFound", err)
			}
			hs := []keystore.Hash{all[5].Hash, keystore.HashKey("svc_live_unknown"), all[0].Hash}
			if got, err := a.GetHashes(ctx, hs); err != nil || !reflect.DeepEqual(got, []keystore.Record{all[0], all[5]}) {
				t.Errorf("GetHashes = %+v, %v\nwant the first and the last of List", got, err)
			}
			var want []keystore.Record
			for _, r := range all {
				if r.Name == "k1" {
					want = append(want, r)
				}
			}
			if got, err := a.ListMatching(ctx, func(r keystore.Record) bool { return r.Name == "k1" }); err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("ListMatching = %+v, %v\nwant %+v", got, err, want)
			}
			gotCons, err := a.GetConsumers(ctx, []string{cons[2].ID, "con_0000000000000000", cons[0].ID})
			if err != nil || len(gotCons) != 2 || gotCons[0].ID != cons[2].ID || gotCons[1].ID != cons[0].ID {
				t.Errorf("GetConsumers = %+v, %v; want consumers 2 and 0", gotCons, err)
			}
		})
	}
}
