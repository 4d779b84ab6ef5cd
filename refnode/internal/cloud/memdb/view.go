package memdb

import (
	"context"
	"fmt"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
)

// View is the store as one management node reaches it: every call goes to
// the [Store] unless that node was cut off with [Store.SetUnreachable]. A
// View is safe for concurrent use.
type View struct {
	s    *Store
	node string
}

var _ cloud.Store = (*View)(nil)

// For returns the store as node reaches it. Views of one node share its
// reachability.
func (s *Store) For(node string) *View { return &View{s: s, node: node} }

// SetUnreachable cuts node's views off the store (on) or reconnects them
// (off). While cut off, every call through them fails at once with an
// error matching [ErrUnreachable] and changes nothing. Calls on the Store
// itself are not affected.
func (s *Store) SetUnreachable(node string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.unreachable[node] = true
	} else {
		delete(s.unreachable, node)
	}
}

func (v *View) reach(op string) error { return v.s.reach(v.node, op) }

// reach returns an error matching ErrUnreachable if node ("" for the
// Store itself, always reachable) is cut off.
func (s *Store) reach(node, op string) error {
	if node == "" {
		return nil
	}
	s.mu.Lock()
	cut := s.unreachable[node]
	s.mu.Unlock()
	if cut {
		return fmt.Errorf("memdb: %s from node %s: %w", op, node, ErrUnreachable)
	}
	return nil
}

// AddHost implements [cloud.Store.AddHost] for the view's node.
func (v *View) AddHost(ctx context.Context, h cloud.Host) error {
	if err := v.reach("add host"); err != nil {
		return err
	}
	return v.s.AddHost(ctx, h)
}

// Host implements [cloud.Store.Host] for the view's node.
func (v *View) Host(ctx context.Context, uuid string) (cloud.Host, error) {
	if err := v.reach("get host"); err != nil {
		return cloud.Host{}, err
	}
	return v.s.Host(ctx, uuid)
}

// Hosts implements [cloud.Store.Hosts] for the view's node.
func (v *View) Hosts(ctx context.Context) ([]cloud.Host, error) {
	if err := v.reach("list hosts"); err != nil {
		return nil, err
	}
	return v.s.Hosts(ctx)
}

// UpdateHost implements [cloud.Store.UpdateHost] for the view's node.
func (v *View) UpdateHost(ctx context.Context, uuid string, update func(*cloud.Host) error) (cloud.Host, error) {
	if err := v.reach("update host"); err != nil {
		return cloud.Host{}, err
	}
	return v.s.UpdateHost(ctx, uuid, update)
}

// AddImage implements [cloud.Store.AddImage] for the view's node.
func (v *View) AddImage(ctx context.Context, img cloud.Image) error {
	if err := v.reach("add image"); err != nil {
		return err
	}
	return v.s.AddImage(ctx, img)
}

// Image implements [cloud.Store.Image] for the view's node.
func (v *View) Image(ctx context.Context, uuid string) (cloud.Image, error) {
	if err := v.reach("get image"); err != nil {
		return cloud.Image{}, err
	}
	return v.s.Image(ctx, uuid)
}

// Images implements [cloud.Store.Images] for the view's node.
func (v *View) Images(ctx context.Context) ([]cloud.Image, error) {
	if err := v.reach("list images"); err != nil {
		return nil, err
	}
	return v.s.Images(ctx)
}

// UpdateImage implements [cloud.Store.UpdateImage] for the view's node.
func (v *View) UpdateImage(ctx context.Context, uuid string, update func(*cloud.Image) error) (cloud.Image, error) {
	if err := v.reach("update image"); err != nil {
		return cloud.Image{}, err
	}
	return v.s.UpdateImage(ctx, uuid, update)
}

// LockImage implements [cloud.Store.LockImage] for the view's node.
func (v *View) LockImage(ctx context.Context, uuid string) (cloud.Image, error) {
	if err := v.reach("lock image"); err != nil {
		return cloud.Image{}, err
	}
	return v.s.LockImage(ctx, uuid)
}

// DeleteImage implements [cloud.Store.DeleteImage] for the view's node.
func (v *View) DeleteImage(ctx context.Context, uuid string) error {
	if err := v.reach("delete image"); err != nil {
		return err
	}
	return v.s.DeleteImage(ctx, uuid)
}

// AddVM implements [cloud.Store.AddVM] for the view's node.
func (v *View) AddVM(ctx context.Context, vm cloud.VM) error {
	if err := v.reach("add vm"); err != nil {
		return err
	}
	return v.s.AddVM(ctx, vm)
}

// VM implements [cloud.Store.VM] for the view's node.
func (v *View) VM(ctx context.Context, uuid string) (cloud.VM, error) {
	if err := v.reach("get vm"); err != nil {
		return cloud.VM{}, err
	}
	return v.s.VM(ctx, uuid)
}

// VMs implements [cloud.Store.VMs] for the view's node.
func (v *View) VMs(ctx context.Context) ([]cloud.VM, error) {
	if err := v.reach("list vms"); err != nil {
		return nil, err
	}
	return v.s.VMs(ctx)
}

// UpdateVM implements [cloud.Store.UpdateVM] for the view's node.
func (v *View) UpdateVM(ctx context.Context, uuid string, update func(*cloud.VM) error) (cloud.VM, error) {
	if err := v.reach("update vm"); err != nil {
		return cloud.VM{}, err
	}
	return v.s.UpdateVM(ctx, uuid, update)
}

// AddJob implements [cloud.Store.AddJob] for the view's node.
func (v *View) AddJob(ctx context.Context, j cloud.Job) error {
	if err := v.reach("add job"); err != nil {
		return err
	}
	return v.s.AddJob(ctx, j)
}

// Job implements [cloud.Store.Job] for the view's node.
func (v *View) Job(ctx context.Context, uuid string) (cloud.Job, error) {
	if err := v.reach("get job"); err != nil {
		return cloud.Job{}, err
	}
	return v.s.Job(ctx, uuid)
}

// Jobs implements [cloud.Store.Jobs] for the view's node.
func (v *View) Jobs(ctx context.Context) ([]cloud.Job, error) {
	if err := v.reach("list jobs"); err != nil {
		return nil, err
	}
	return v.s.Jobs(ctx)
}

// UpdateJob implements [cloud.Store.UpdateJob] for the view's node.
func (v *View) UpdateJob(ctx context.Context, uuid string, update func(*cloud.Job) error) (cloud.Job, error) {
	if err := v.reach("update job"); err != nil {
		return cloud.Job{}, err
	}
	return v.s.UpdateJob(ctx, uuid, update)
}

// Do implements [cloud.Store.Do] for the view's node: fn reads and
// writes as the node, and a node cut off before the commit writes
// nothing.
func (v *View) Do(ctx context.Context, w fence.Guard, fn func(ctx context.Context, tx cloud.Store) ([]byte, error)) ([]byte, error) {
	if err := v.reach("transaction"); err != nil {
		return nil, err
	}
	return v.s.do(ctx, w, v.node, fn)
}

// Verify implements [cloud.Store.Verify]: outside a transaction, nil.
func (v *View) Verify(context.Context) error { return nil }
