package rest

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
)

// Routes lists every route the API serves, "METHOD /path", in the order
// of the docs.
var Routes = []string{
	"POST /v1/hosts",
	"GET /v1/hosts",
	"GET /v1/hosts/{uuid}",
	"POST /v1/hosts/{uuid}/reconnect",
	"POST /v1/images",
	"GET /v1/images",
	"GET /v1/images/{uuid}",
	"PATCH /v1/images/{uuid}",
	"DELETE /v1/images/{uuid}",
	"POST /v1/vms",
	"GET /v1/vms",
	"GET /v1/vms/{uuid}",
	"POST /v1/vms/{uuid}/{action}",
	"POST /v1/vms/{uuid}/migrate",
	"GET /v1/jobs",
	"GET /v1/jobs/{uuid}",
	"GET /v1/dead-letters",
	"POST /v1/dead-letters/replay",
	"GET /v1/nodes",
	"GET /v1/owner/{uuid}",
	"GET /v1/openapi.json",
}

func (a *API) routes() {
	handlers := map[string]http.HandlerFunc{
		"POST /v1/hosts":                  a.addHost,
		"GET /v1/hosts":                   a.listHosts,
		"GET /v1/hosts/{uuid}":            a.getHost,
		"POST /v1/hosts/{uuid}/reconnect": a.reconnectHost,
		"POST /v1/images":                 a.addImage,
		"GET /v1/images":                  a.listImages,
		"GET /v1/images/{uuid}":           a.getImage,
		"PATCH /v1/images/{uuid}":         a.renameImage,
		"DELETE /v1/images/{uuid}":        a.deleteImage,
		"POST /v1/vms":                    a.createVM,
		"GET /v1/vms":                     a.listVMs,
		"GET /v1/vms/{uuid}":              a.getVM,
		"POST /v1/vms/{uuid}/{action}":    a.vmAction,
		"POST /v1/vms/{uuid}/migrate":     a.migrateVM,
		"GET /v1/jobs":                    a.listJobs,
		"GET /v1/jobs/{uuid}":             a.getJob,
		"GET /v1/dead-letters":            a.listDeadLetters,
		"POST /v1/dead-letters/replay":    a.replayDeadLetters,
		"GET /v1/nodes":                   a.nodes,
		"GET /v1/owner/{uuid}":            a.owner,
		"GET /v1/openapi.json": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(OpenAPI)
		},
	}
	for _, p := range Routes {
		a.mux.HandleFunc(p, handlers[p])
	}
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, apiError{Code: string(message.ErrNotFound.Code), Message: fmt.Sprintf("no route %s %s; the API's routes start with /v1/", r.Method, r.URL.Path), Retry: "never"})
	})
}

// newUUID returns the body's UUID, canonical, or if it has none a new
// one: derived from the request's Idempotency-Key if it has one, so that
// a repeated request is the same message. It writes a 400 for a
// malformed one.
func newUUID(w http.ResponseWriter, r *http.Request, id string) (string, bool) {
	if id == "" {
		if key, err := idempotencyKey(r); err == nil && key != "" {
			return message.KeyUUID("refnode.rest.resource", key), true
		}
		return message.NewUUID(), true
	}
	c, err := message.NormalizeUUID(id)
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Code: string(message.ErrInvalidUUID.Code), Message: err.Error(), Field: "uuid", Retry: "never"})
		return "", false
	}
	return c, true
}

// validate writes a 400 naming the first field of msg outside its
// limits, before anything is sent.
func validate(w http.ResponseWriter, msg interface{ Validate() error }) bool {
	err := msg.Validate()
	if err == nil {
		return true
	}
	out := apiError{Code: string(message.ErrBadRequest.Code), Message: err.Error(), Retry: "never"}
	if inv, ok := err.(*api.InvalidError); ok && len(inv.Fields) > 0 {
		out.Field = inv.Fields[0].Field
	}
	writeError(w, http.StatusBadRequest, out)
	return false
}

func (a *API) addHost(w http.ResponseWriter, r *http.Request) {
	var m api.AddHost
	if !a.decode(w, r, &m, false) {
		return
	}
	var ok bool
	if m.UUID, ok = newUUID(w, r, m.UUID); !ok || !validate(w, m) {
		return
	}
	w.Header().Set("Location", "/v1/hosts/"+m.UUID)
	send(a, w, r, m, http.StatusCreated, func(rep api.HostReply) (any, *apiError) { return rep.Host, nil })
}

func (a *API) getHost(w http.ResponseWriter, r *http.Request) {
	if id, ok := pathUUID(w, r); ok {
		send(a, w, r, api.GetHost{UUID: id}, http.StatusOK, func(rep api.HostReply) (any, *apiError) { return rep.Host, nil })
	}
}

func (a *API) reconnectHost(w http.ResponseWriter, r *http.Request) {
	id, ok := pathUUID(w, r)
	if !ok || !a.decode(w, r, &struct{}{}, true) {
		return
	}
	send(a, w, r, api.ReconnectHost{UUID: id}, http.StatusOK, func(rep api.HostReply) (any, *apiError) { return rep.Host, nil })
}

func (a *API) addImage(w http.ResponseWriter, r *http.Request) {
	var m api.AddImage
	if !a.decode(w, r, &m, false) {
		return
	}
	var ok bool
	if m.UUID, ok = newUUID(w, r, m.UUID); !ok || !validate(w, m) {
		return
	}
	w.Header().Set("Location", "/v1/images/"+m.UUID)
	send(a, w, r, m, http.StatusCreated, func(rep api.ImageReply) (any, *apiError) { return rep.Image, nil })
}

func (a *API) getImage(w http.ResponseWriter, r *http.Request) {
	if id, ok := pathUUID(w, r); ok {
		send(a, w, r, api.GetImage{UUID: id}, http.StatusOK, func(rep api.ImageReply) (any, *apiError) { return rep.Image, nil })
	}
}

// deleteImage sends DeleteImage to the image's owner: 200 with the image
// as it was deleted; 409 while a VM that is not destroyed uses it.
func (a *API) deleteImage(w http.ResponseWriter, r *http.Request) {
	if id, ok := pathUUID(w, r); ok {
		send(a, w, r, api.DeleteImage{UUID: id}, http.StatusOK, func(rep api.ImageDeleted) (any, *apiError) { return rep.Image, nil })
	}
}

// imagePatch is the body of PATCH /v1/images/{uuid}.
type imagePatch struct {
	// Name is the new name. Required.
	Name *string `json:"name"`
	// IfName, if set, makes the rename a compare-and-set: only if the
	// image's name is IfName now.
	IfName *string `json:"if_name"`
}

func (a *API) renameImage(w http.ResponseWriter, r *http.Request) {
	id, ok := pathUUID(w, r)
	var p imagePatch
	if !ok || !a.decode(w, r, &p, false) {
		return
	}
	if p.Name == nil {
		badRequest(w, "name", "name is required: the image's new name")
		return
	}
	m := api.SetImageName{UUID: id, Name: *p.Name, IfName: p.IfName}
	if !validate(w, m) {
		return
	}
	send(a, w, r, m, http.StatusOK, func(rep api.ImageNameSet) (any, *apiError) {
		if !rep.Set {
			return nil, &apiError{Code: string(message.ErrFailedPrecondition.Code), Field: "if_name", Retry: "never",
				Message: fmt.Sprintf("image %s is named %q, not %q: nothing was written", id, rep.Image.Name, *p.IfName)}
		}
		return rep.Image, nil
	})
}

func (a *API) createVM(w http.ResponseWriter, r *http.Request) {
	var m api.CreateVm
	if !a.decode(w, r, &m, false) {
		return
	}
	var ok bool
	if m.UUID, ok = newUUID(w, r, m.UUID); !ok {
		return
	}
	if m.ImageUUID == "" {
		badRequest(w, "image_uuid", "image_uuid is required: the image to create the VM from")
		return
	}
	img, err := message.NormalizeUUID(m.ImageUUID)
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Code: string(message.ErrInvalidUUID.Code), Message: err.Error(), Field: "image_uuid", Retry: "never"})
		return
	}
	m.ImageUUID = img
	if !validate(w, m) {
		return
	}
	w.Header().Set("Location", "/v1/vms/"+m.UUID)
	send(a, w, r, m, http.StatusCreated, func(rep api.VmCreated) (any, *apiError) { return rep.VM, nil })
}

func (a *API) getVM(w http.ResponseWriter, r *http.Request) {
	if id, ok := pathUUID(w, r); ok {
		send(a, w, r, api.GetVm{UUID: id}, http.StatusOK, func(rep api.VmReply) (any, *apiError) { return rep.VM, nil })
	}
}

// vmActions are the actions of POST /v1/vms/{uuid}/{action}.
var vmActions = map[string]func(id string) any{
	"start":   func(id string) any { return api.StartVm{UUID: id} },
	"stop":    func(id string) any { return api.StopVm{UUID: id} },
	"reboot":  func(id string) any { return api.RebootVm{UUID: id} },
	"destroy": func(id string) any { return api.DestroyVm{UUID: id} },
}

func (a *API) vmAction(w http.ResponseWriter, r *http.Request) {
	mk, known := vmActions[r.PathValue("action")]
	if !known {
		writeError(w, http.StatusNotFound, apiError{Code: string(message.ErrNotFound.Code), Field: "action", Retry: "never",
			Message: fmt.Sprintf("no VM action %q; the actions are start, stop, reboot, destroy and migrate", r.PathValue("action"))})
		return
	}
	id, ok := pathUUID(w, r)
	if !ok || !a.decode(w, r, &struct{}{}, true) {
		return
	}
	send(a, w, r, mk(id), http.StatusOK, func(rep api.VmReply) (any, *apiError) { return rep.VM, nil })
}

// page is the body of a list.
type page[T any] struct {
	// Items are the page's records, sorted by UUID.
	Items []T `json:"items"`
	// NextCursor, if not empty, is the ?cursor= of the next page.
	NextCursor string `json:"next_cursor,omitempty"`
	// Source says where the list was read: "database" (not from the
	// resources' owners: a record may be a moment behind its owner).
	Source string `json:"source"`
}

// list writes one page of the records all reads, those keep selects,
// sorted by UUID: ?limit= (DefaultPage, at most MaxPage) records after
// ?cursor= (a UUID: the previous page's next_cursor). Records created
// while a client pages appear in a later page or not at all; none
// appears twice or is skipped.
func list[T any](a *API, w http.ResponseWriter, r *http.Request, all func(context.Context) ([]T, error), uuid func(T) string, keep func(T) bool) {
	q := r.URL.Query()
	limit := DefaultPage
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPage {
			badRequest(w, "limit", "limit must be a number from 1 to %d", MaxPage)
			return
		}
		limit = n
	}
	cursor := q.Get("cursor")
	if cursor != "" {
		c, err := message.NormalizeUUID(cursor)
		if err != nil {
			badRequest(w, "cursor", "cursor must be the next_cursor of a previous page: %v", err)
			return
		}
		cursor = c
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.Timeout)
	defer cancel()
	recs, err := all(ctx)
	if err != nil {
		if r.Context().Err() == nil {
			a.fail(w, r, fmt.Errorf("read the list from the database: %w", err), false)
		}
		return
	}
	slices.SortFunc(recs, func(x, y T) int { return cmp.Compare(uuid(x), uuid(y)) })
	out := page[T]{Items: []T{}, Source: "database"}
	start, _ := slices.BinarySearchFunc(recs, cursor, func(x T, c string) int { return cmp.Compare(uuid(x), c) })
	for _, rec := range recs[start:] {
		if uuid(rec) == cursor || !keep(rec) {
			continue
		}
		if len(out.Items) == limit {
			out.NextCursor = uuid(out.Items[len(out.Items)-1])
			break
		}
		out.Items = append(out.Items, rec)
	}
	w.Header().Set(HeaderSource, "database")
	writeJSON(w, http.StatusOK, out)
}

func (a *API) listHosts(w http.ResponseWriter, r *http.Request) {
	status := r.URL.Query().Get("status")
	if status != "" && status != string(cloud.HostConnected) && status != string(cloud.HostDisconnected) {
		badRequest(w, "status", "status %q is not a host status: connected or disconnected", status)
		return
	}
	list(a, w, r, a.cfg.Store.Hosts, func(h cloud.Host) string { return h.UUID },
		func(h cloud.Host) bool { return status == "" || string(h.Status) == status })
}

func (a *API) listImages(w http.ResponseWriter, r *http.Request) {
	list(a, w, r, a.cfg.Store.Images, func(i cloud.Image) string { return i.UUID }, func(cloud.Image) bool { return true })
}

// vmStates are the states ?state= may select.
var vmStates = []cloud.VMState{cloud.VMCreated, cloud.VMStarting, cloud.VMRunning, cloud.VMStopping, cloud.VMStopped, cloud.VMRebooting, cloud.VMDestroyed}

func (a *API) listVMs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state, host, image := q.Get("state"), q.Get("host_uuid"), q.Get("image_uuid")
	if state != "" && !slices.Contains(vmStates, cloud.VMState(state)) {
		badRequest(w, "state", "state %q is not a VM state: %v", state, vmStates)
		return
	}
	for field, v := range map[string]*string{"host_uuid": &host, "image_uuid": &image} {
		if *v == "" {
			continue
		}
		c, err := message.NormalizeUUID(*v)
		if err != nil {
			writeError(w, http.StatusBadRequest, apiError{Code: string(message.ErrInvalidUUID.Code), Message: err.Error(), Field: field, Retry: "never"})
			return
		}
		*v = c
	}
	list(a, w, r, a.cfg.Store.VMs, func(v cloud.VM) string { return v.UUID }, func(v cloud.VM) bool {
		return (state == "" || string(v.State) == state) && (host == "" || v.HostUUID == host) && (image == "" || v.ImageUUID == image)
	})
}
