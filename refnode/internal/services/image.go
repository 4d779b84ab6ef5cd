package services

import (
	"context"
	"log/slog"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// ImageService is the "image" service: it adds and reads images, each on
// the image's ring owner. It implements service.Starter and
// service.APIService. Safe for concurrent use once started.
type ImageService struct {
	store cloud.Store
	log   *slog.Logger
	node  *service.Node
	mux   *bus.Mux
}

func newImageService(cfg Config) *ImageService {
	s := &ImageService{store: cfg.Store, log: cfg.Logger.With("service", api.ImageService), mux: bus.NewMux()}
	bus.HandleRequest(s.mux, s.add)
	bus.HandleRequest(s.mux, s.get)
	return s
}

// Name returns "image".
func (s *ImageService) Name() string { return api.ImageService }

// APIMessages returns AddImage and GetImage.
func (s *ImageService) APIMessages() []any { return []any{api.AddImage{}, api.GetImage{}} }

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
	return s.mux.Handle(ctx, r)
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
