package services_test

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/service"
)

// TestSetImageName: SetImageName writes the name on the image's owner,
// with if_name only if the name is if_name then; a resent message gets
// its first reply and runs once; a missing image is not_found and a name
// outside the limits bad_request naming the field.
func TestSetImageName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 3, simhv.Config{})
		ctx := t.Context()
		img := f.addImage(t) // named "img"
		set := func(m api.SetImageName, opts ...bus.Option) api.ImageNameSet {
			t.Helper()
			m.UUID = img
			rep, err := service.Call[api.ImageNameSet](ctx, f.cl, m, opts...)
			require.NoError(t, err)
			assert.Equal(t, f.c.Owner(img), rep.Node, "handled by the image's owner")
			assert.NotEmpty(t, rep.Portal)
			assert.Equal(t, img, rep.Image.UUID)
			return rep
		}
		name := func() string {
			got, err := service.Call[api.ImageReply](ctx, f.cl, api.GetImage{UUID: img})
			require.NoError(t, err)
			return got.Image.Name
		}

		rep := set(api.SetImageName{Name: "a"})
		assert.True(t, rep.Set, "a plain SetImageName writes")
		assert.Equal(t, "a", rep.Image.Name)
		rep = set(api.SetImageName{Name: "b", IfName: new("a")})
		assert.True(t, rep.Set, "compare-and-set from the current name")
		assert.Equal(t, "b", rep.Image.Name)
		rep = set(api.SetImageName{Name: "c", IfName: new("a")})
		assert.False(t, rep.Set, "compare-and-set from another name")
		assert.Equal(t, "b", rep.Image.Name, "the reply holds the name the operation found")
		rep = set(api.SetImageName{Name: "c", IfName: new("")})
		assert.False(t, rep.Set, `if_name "" compares with the empty name`)
		assert.Equal(t, "b", name(), "a refused compare-and-set writes nothing")
		rep = set(api.SetImageName{Name: ""})
		assert.True(t, rep.Set)
		rep = set(api.SetImageName{Name: "d", IfName: new("")})
		assert.True(t, rep.Set, `if_name "" matches the empty name`)

		// Resent with its id: the first reply, not a second run.
		id := message.NewUUID()
		first := set(api.SetImageName{Name: "e", IfName: new("d")}, bus.WithID(id))
		assert.True(t, first.Set)
		set(api.SetImageName{Name: "f"})
		again := set(api.SetImageName{Name: "e", IfName: new("d")}, bus.WithID(id))
		assert.Equal(t, first, again, "a resent message gets its first reply")
		assert.Equal(t, "f", name(), "and does not run again")
		_, err := service.Call[api.ImageNameSet](ctx, f.cl, api.SetImageName{UUID: img, Name: "other"}, bus.WithID(id))
		assert.ErrorIs(t, err, message.ErrBadRequest, "an id reused for another message")

		_, err = service.Call[api.ImageNameSet](ctx, f.cl, api.SetImageName{UUID: message.NewUUID(), Name: "x"})
		assert.ErrorIs(t, err, message.ErrNotFound, "a missing image")
		for field, m := range map[string]api.SetImageName{
			"name":    {UUID: img, Name: strings.Repeat("n", api.MaxNameBytes+1)},
			"if_name": {UUID: img, Name: "x", IfName: new(strings.Repeat("n", api.MaxNameBytes+1))},
		} {
			_, err = service.Call[api.ImageNameSet](ctx, f.cl, m)
			require.ErrorIs(t, err, message.ErrBadRequest, field)
			assert.Contains(t, err.Error(), field, "the error names the field")
		}
		assert.Equal(t, "f", name(), "refused messages write nothing")
	})
}

// TestDeleteImageRacesCreates: DeleteImage sent while VMs are created
// from the image, on other nodes, never leaves a VM of a deleted image:
// either the delete is refused (conflict: a VM uses it) or every create
// that did not commit first fails not_found, its definition undone on the
// hypervisor.
func TestDeleteImageRacesCreates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 3, simhv.Config{Latency: time.Millisecond})
		ctx := t.Context()
		f.addHosts(t, 2)
		deletedRounds, refusedRounds := 0, 0
		for round := range 20 {
			img := f.addImage(t)
			const creates = 6
			vms := make([]string, creates)
			errs := make([]error, creates)
			var delErr error
			var wg sync.WaitGroup
			for i := range creates {
				vms[i] = message.NewUUID()
				wg.Go(func() {
					_, errs[i] = service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{UUID: vms[i], ImageUUID: img})
				})
			}
			wg.Go(func() {
				time.Sleep(time.Duration(round%4) * time.Millisecond) // virtual: vary the order
				_, delErr = service.Call[api.ImageDeleted](ctx, f.cl, api.DeleteImage{UUID: img})
			})
			wg.Wait()
			all, err := f.db.VMs(ctx)
			require.NoError(t, err)
			using := 0
			for _, vm := range all {
				if vm.ImageUUID == img {
					using++
				}
			}
			switch {
			case delErr == nil:
				deletedRounds++
				assert.Zero(t, using, "round %d: the image was deleted, yet %d VMs use it", round, using)
				for i, err := range errs {
					assert.ErrorIs(t, err, message.ErrNotFound, "round %d: a create after the delete", round)
					_, defined := f.hv.PowerOf(vms[i])
					assert.False(t, defined, "round %d: the failed create's definition is undone", round)
				}
			default:
				refusedRounds++
				assert.ErrorIs(t, delErr, message.ErrConflict, "round %d", round)
				assert.Positive(t, using, "round %d: refused, so a VM uses the image", round)
				_, err := f.db.Image(ctx, img)
				assert.NoError(t, err, "round %d: a refused delete leaves the image", round)
			}
		}
		t.Logf("20 rounds of 6 creates racing a delete: %d deleted first, %d refused", deletedRounds, refusedRounds)
		assert.Positive(t, deletedRounds+refusedRounds)
	})
}
