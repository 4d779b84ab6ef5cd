package services

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// ImageService is the "image" service: it adds, renames and reads
// images, each on the image's ring owner. It implements service.Starter
// and service.APIService. Safe for concurrent use once started.
type ImageService struct {
	store cloud.Store
	log   *slog.Logger
	node  *service.Node
	*bus.Mux
	stall func(ctx context.Context, image, name string) // Config.StallImageWrite
}

func newImageService(cfg Config) *ImageService {
	s := &ImageService{store: cfg.Store, log: cfg.Logger.With("service", api.ImageService), Mux: bus.NewMux(), stall: cfg.StallImageWrite}
	bus.Handle(s.Mux, s.add)
	bus.Handle(s.Mux, s.get)
	bus.Handle(s.Mux, s.setName)
	bus.Handle(s.Mux, s.delete)
	return s
}

// Name returns "image".
func (s *ImageService) Name() string { return api.ImageService }

// APIMessages returns AddImage, GetImage, SetImageName and DeleteImage.
func (s *ImageService) APIMessages() []any {
	return []any{api.AddImage{}, api.GetImage{}, api.SetImageName{}, api.DeleteImage{}}
}

// Start binds the service to its node.
func (s *ImageService) Start(ctx context.Context, n *service.Node) error {
	s.node = n
	s.log = s.log.With("node", n.UUID())
	return nil
}

// Handle handles one message; see [bus.Handler].
func (s *ImageService) Handle(ctx context.Context, r *bus.Request) (any, error) {
	if err := started(s.node, api.ImageService); err != nil {
		return nil, err
	}
	resp, err := s.Mux.Handle(ctx, r)
	return resp, answer(s.log, r, err)
}

func (s *ImageService) add(ctx context.Context, r *bus.Request, m api.AddImage) (api.ImageReply, error) {
	if err := m.Validate(); err != nil {
		return api.ImageReply{}, err
	}
	id := r.Resource() // m.UUID, canonical: the bus checked
	reply, err := cloud.Run(ctx, s.store, fence.For(ctx, r), func(ctx context.Context, tx cloud.Store) (api.ImageReply, error) {
		img := cloud.Image{UUID: id, Name: m.Name, URL: m.URL, SizeMB: m.SizeMB}
		if err := tx.AddImage(ctx, img); err != nil {
			return api.ImageReply{}, err
		}
		return api.ImageReply{Image: img, Handling: handling(r)}, nil
	})
	if err != nil {
		return api.ImageReply{}, stale(s.log, err)
	}
	s.log.Info("image added", "image", id, "name", m.Name)
	return reply, nil
}

func (s *ImageService) get(ctx context.Context, r *bus.Request, _ api.GetImage) (api.ImageReply, error) {
	img, err := s.store.Image(ctx, r.Resource())
	if err != nil {
		return api.ImageReply{}, err
	}
	return api.ImageReply{Image: img, Handling: handling(r)}, nil
}

// delete handles DeleteImage on the image's owner: one transaction,
// fenced by this node's claim on the image and recorded under the
// message's key, locks the image's record, refuses (conflict) while a VM
// that is not destroyed uses it, and deletes it. CreateVm locks the image
// too, as the last step of its transaction, so a create and a delete of
// one image cannot both commit: whichever locks second either finds the
// image gone (the create fails, not_found) or the new VM (the delete is
// refused).
func (s *ImageService) delete(ctx context.Context, r *bus.Request, _ api.DeleteImage) (api.ImageDeleted, error) {
	id := r.Resource() // m.UUID, canonical: the bus checked
	reply, err := cloud.Run(ctx, s.store, fence.For(ctx, r), func(ctx context.Context, tx cloud.Store) (api.ImageDeleted, error) {
		img, err := tx.LockImage(ctx, id) // before the check
		if err != nil {
			return api.ImageDeleted{}, err
		}
		vms, err := tx.VMs(ctx)
		if err != nil {
			return api.ImageDeleted{}, err
		}
		var using []string
		for _, vm := range vms {
			if vm.ImageUUID == id && vm.State != cloud.VMDestroyed {
				using = append(using, vm.UUID)
			}
		}
		if len(using) > 0 {
			return api.ImageDeleted{}, message.ErrConflict.WithDetails(fmt.Sprintf("image %s is used by %d VM(s) that are not destroyed (vm %s first): destroy them, then delete the image", id, len(using), using[0]))
		}
		if err := tx.DeleteImage(ctx, id); err != nil {
			return api.ImageDeleted{}, err
		}
		return api.ImageDeleted{Image: img, Handling: handling(r)}, nil
	})
	if err != nil {
		return api.ImageDeleted{}, stale(s.log, err)
	}
	s.log.Info("image deleted", "image", id, "msg", r.ID())
	return reply, nil
}

// errNameDiffers ends a compare-and-set's update when the image's name
// is not the one expected; the reply says so (Set false).
var errNameDiffers = errors.New("image: the name differs")

// setName handles SetImageName on the image's owner: one transaction
// fenced by this node's claim on the image and recorded under the
// message's key reads the image, compares its name and writes the new
// one. So a node that lost the image writes nothing (not_owner), and a
// redelivered message gets its first reply without running again: a
// compare-and-set that failed stays failed. The compare is made again
// in the update function, which holds the image's record until the
// commit, so it is atomic even against a writer outside the fence.
func (s *ImageService) setName(ctx context.Context, r *bus.Request, m api.SetImageName) (api.ImageNameSet, error) {
	if err := m.Validate(); err != nil {
		return api.ImageNameSet{}, err
	}
	id := r.Resource() // m.UUID, canonical: the bus checked
	reply, err := cloud.Run(ctx, s.store, fence.For(ctx, r), func(ctx context.Context, tx cloud.Store) (api.ImageNameSet, error) {
		img, err := tx.Image(ctx, id)
		if err != nil {
			return api.ImageNameSet{}, err
		}
		if m.IfName != nil && img.Name != *m.IfName {
			return api.ImageNameSet{Image: img, Handling: handling(r)}, nil
		}
		if s.stall != nil {
			s.stall(ctx, id, m.Name)
		}
		img, err = tx.UpdateImage(ctx, id, func(img *cloud.Image) error {
			if m.IfName != nil && img.Name != *m.IfName {
				return errNameDiffers
			}
			img.Name = m.Name
			return nil
		})
		if errors.Is(err, errNameDiffers) { // changed since the read: only a writer outside the fence can
			cur, err := tx.Image(ctx, id)
			return api.ImageNameSet{Image: cur, Handling: handling(r)}, err
		}
		if err != nil {
			return api.ImageNameSet{}, err
		}
		return api.ImageNameSet{Image: img, Set: true, Handling: handling(r)}, nil
	})
	if err != nil {
		return api.ImageNameSet{}, stale(s.log, err)
	}
	if reply.Set {
		s.log.Info("image renamed", "image", id, "name", m.Name, "msg", r.ID())
	} else {
		s.log.Info("image not renamed: its name differs", "image", id, "name", reply.Image.Name, "if_name", *m.IfName, "msg", r.ID())
	}
	return reply, nil
}
