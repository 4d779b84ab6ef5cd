package services

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// migrate handles MigrateVm on the VM's owner: it runs the job's steps
// that remain (see [VMService.runMigration]).
func (s *VMService) migrate(ctx context.Context, r *bus.Request, m api.MigrateVm) (api.JobReply, error) {
	if err := m.Validate(); err != nil {
		return api.JobReply{}, err
	}
	jobID, _ := message.NormalizeUUID(m.Job) // Validate checked it
	job, err := s.runMigration(ctx, fence.For(ctx, r).Claim, r.Resource(), jobID)
	if err != nil {
		return api.JobReply{}, stale(s.log, err)
	}
	return api.JobReply{Job: job, Handling: handling(r)}, nil
}

// runMigration runs the steps of migration job jobID of VM vm that its
// record says remain, under claim (this node's on the VM), and returns
// the job as it left it. Each step is a transaction that records itself
// in the job, so the next run (a copy of the message, the sweep of this
// node or of the VM's next owner) resumes after the last one recorded:
//
//  1. checked, on the VM's owner: the VM exists, is created, running or
//     stopped, is not on the target, and the target exists; the source
//     host is recorded. Else the job fails with the refusal's code.
//  2. target-ready, on the target host's owner (PrepareMigration, under
//     its claim on the host): the host is connected and answers its
//     ping. A refusal (not found, failed precondition) fails the job:
//     nothing moved.
//  3. moved, on the VM's owner: the hypervisor moves the VM (idempotent:
//     a VM already on the target stays), the VM's record names the
//     target, and the job succeeds, in one transaction. A VM destroyed
//     meanwhile (on the host its record names, while the move of a run
//     whose record failed may have put it on the target) is destroyed
//     on the target too, and the job fails with code conflict.
//
// A job still pending at its Deadline fails with code timeout; one past
// step 1 is driven to its end, never left half-way, unless its move
// fails after its Deadline while the hypervisor says the VM is still
// wholly on its source: then it fails with code timeout, nothing moved
// (a hypervisor that cannot tell keeps it going). An error that is no
// refusal (a database or hypervisor failure, a lost claim) leaves the job
// at its last step and is returned: a retry or a sweep resumes it.
func (s *VMService) runMigration(ctx context.Context, claim fence.Claim, vm, jobID string) (cloud.Job, error) {
	if _, busy := s.migrating.LoadOrStore(jobID, true); busy { // resumed by this node already
		return s.store.Job(ctx, jobID)
	}
	defer s.migrating.Delete(jobID)
	g := fence.Guard{Claim: claim} // no key: the job records each step
	node := s.node.UUID()
	job, err := cloud.Run(ctx, s.store, g, func(ctx context.Context, tx cloud.Store) (cloud.Job, error) {
		j, err := tx.Job(ctx, jobID)
		if err != nil {
			return j, err
		}
		if j.Kind != api.JobMigrateVM || j.Resource != vm {
			return j, message.ErrBadRequest.WithDetails(fmt.Sprintf("job %s is a %s job of %s, not a migration of vm %s", jobID, j.Kind, j.Resource, vm))
		}
		if j.State != cloud.JobPending {
			return j, nil
		}
		now := time.Now()
		args, refusal := api.ParseMigrateArgs(j.Args)
		if refusal != nil {
			refusal = message.ErrBadRequest.WithDetails(fmt.Sprintf("job %s: its args %q are not a migration's: %v", jobID, j.Args, refusal))
		} else if !j.Deadline.IsZero() && now.After(j.Deadline) {
			refusal = message.ErrTimeout.WithDetails(fmt.Sprintf("job %s was not started by its deadline %s; nothing moved", jobID, j.Deadline.UTC().Format(time.RFC3339)))
		} else if refusal, err = checkMigration(ctx, tx, vm, &args); err != nil {
			return j, err
		}
		return tx.UpdateJob(ctx, jobID, func(j *cloud.Job) error {
			j.Node, j.UpdatedAt = node, now
			if refusal != nil {
				failJob(j, refusal)
				return nil
			}
			b, _ := json.Marshal(args)
			j.Args, j.State, j.Step = string(b), cloud.JobRunning, api.StepChecked
			return nil
		})
	})
	if err != nil || job.State.Terminal() {
		return job, err
	}
	args, err := api.ParseMigrateArgs(job.Args)
	if err != nil {
		return job, fmt.Errorf("vmInstance: migration job %s: its args %q: %w", jobID, job.Args, err)
	}
	if job.Step == api.StepChecked {
		_, err := service.Call[api.MigrationPrepared](ctx, s.node, api.PrepareMigration{HostUUID: args.HostUUID, VM: vm, Job: jobID})
		switch {
		case errors.Is(err, message.ErrNotFound), errors.Is(err, message.ErrFailedPrecondition):
			s.log.Info("vm migration refused by the target host", "vm", vm, "job", jobID, "host", args.HostUUID, "err", err)
			return cloud.Run(ctx, s.store, g, func(ctx context.Context, tx cloud.Store) (cloud.Job, error) {
				return tx.UpdateJob(ctx, jobID, func(j *cloud.Job) error {
					if !j.State.Terminal() {
						j.Node, j.UpdatedAt = node, time.Now()
						failJob(j, err)
					}
					return nil
				})
			})
		case err != nil:
			return job, fmt.Errorf("vmInstance: migrate vm %s: prepare host %s: %w; job %s resumes at the next try", vm, args.HostUUID, err, jobID)
		}
	}
	start := time.Now()
	job, err = cloud.Run(ctx, s.store, g, func(ctx context.Context, tx cloud.Store) (cloud.Job, error) {
		j, err := tx.Job(ctx, jobID)
		if err != nil || j.State.Terminal() {
			return j, err
		}
		if j.Step != api.StepPrepared {
			return j, message.ErrInternal.WithDetails(fmt.Sprintf("job %s is at step %q, not %q, after its target host was prepared", jobID, j.Step, api.StepPrepared))
		}
		rec, err := tx.VM(ctx, vm)
		if err != nil {
			return j, err
		}
		if rec.State == cloud.VMDestroyed {
			// Destroyed while the job was pending, on the host its record
			// names: an earlier run may have moved it to the target
			// before its record failed, so it goes from there too.
			if err := tx.Verify(ctx); err != nil {
				return j, err
			}
			opCtx, cancel := context.WithTimeout(ctx, s.opTimeout)
			err := s.hv.DestroyVM(opCtx, args.HostUUID, vm)
			cancel()
			if err != nil {
				return j, fmt.Errorf("vmInstance: vm %s was destroyed while its migration was pending: destroy it on the target host %s too: %w; job %s resumes at the next try", vm, args.HostUUID, err, jobID)
			}
			return tx.UpdateJob(ctx, jobID, func(j *cloud.Job) error {
				j.Node, j.UpdatedAt = node, time.Now()
				failJob(j, message.ErrConflict.WithDetails(fmt.Sprintf("vm %s was destroyed while this migration was pending; it is on no host", vm)))
				return nil
			})
		}
		switch rec.HostUUID {
		case args.HostUUID: // moved by an earlier run whose record failed, or recorded already
		case args.Source:
			if err := tx.Verify(ctx); err != nil { // still the owner, just before acting
				return j, err
			}
			opCtx, cancel := context.WithTimeout(ctx, s.opTimeout)
			err := s.hv.MigrateVM(opCtx, args.Source, args.HostUUID, vm)
			cancel()
			if err != nil && s.stayedOnSource(ctx, j, args, vm) {
				s.log.Warn("vm migration given up: the move kept failing past the job's deadline and the VM is still on its source", "vm", vm, "job", jobID, "err", err)
				return tx.UpdateJob(ctx, jobID, func(j *cloud.Job) error {
					j.Node, j.UpdatedAt = node, time.Now()
					failJob(j, message.ErrTimeout.WithDetails(fmt.Sprintf("the move of vm %s from host %s to host %s kept failing past the job's deadline %s (last: %v); the VM is still on host %s: nothing moved",
						vm, args.Source, args.HostUUID, j.Deadline.UTC().Format(time.RFC3339), err, args.Source)))
					return nil
				})
			}
			if err != nil {
				return j, fmt.Errorf("vmInstance: migrate vm %s from host %s to host %s: %w; job %s resumes at the next try", vm, args.Source, args.HostUUID, err, jobID)
			}
			if rec, err = tx.UpdateVM(ctx, vm, func(v *cloud.VM) error {
				v.HostUUID = args.HostUUID
				return nil
			}); err != nil {
				return j, err
			}
		default:
			return j, message.ErrInternal.WithDetails(fmt.Sprintf("vm %s is on host %s, neither the migration's source %s nor its target %s", vm, rec.HostUUID, args.Source, args.HostUUID))
		}
		result, _ := json.Marshal(rec)
		return tx.UpdateJob(ctx, jobID, func(j *cloud.Job) error {
			j.State, j.Step, j.Node, j.UpdatedAt, j.Result = cloud.JobSucceeded, api.StepMoved, node, time.Now(), string(result)
			j.Code, j.Error = "", ""
			return nil
		})
	})
	if err == nil && job.State == cloud.JobSucceeded {
		s.log.Info("vm migrated", "vm", vm, "job", jobID, "from", args.Source, "to", args.HostUUID, "took", time.Since(start).Round(time.Millisecond))
	}
	return job, err
}

// stayedOnSource reports whether a migration job whose move just failed
// may give up: its deadline passed, and the hypervisor says the VM is
// on its source and not on its target (unknown there, or the target does
// not answer), so nothing moved. A source that cannot tell (PowerUnknown,
// an error) keeps the job going: a move that may have happened is driven
// to its end.
func (s *VMService) stayedOnSource(ctx context.Context, j cloud.Job, args api.MigrateArgs, vm string) bool {
	if j.Deadline.IsZero() || !time.Now().After(j.Deadline) {
		return false
	}
	opCtx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	src, err := s.hv.VMPower(opCtx, args.Source, vm)
	if err != nil || src == cloud.PowerUnknown {
		return false
	}
	dst, err := s.hv.VMPower(opCtx, args.HostUUID, vm)
	return err != nil || dst == cloud.PowerUnknown // an unreachable target: the source holds the VM
}

// checkMigration is step 1's check of a migration of vm to args.HostUUID:
// a refusal (the job fails with it), or an error that leaves the job
// pending. It sets args.Source.
func checkMigration(ctx context.Context, tx cloud.Store, vm string, args *api.MigrateArgs) (refusal, err error) {
	target, err := message.NormalizeUUID(args.HostUUID)
	if err != nil {
		return message.ErrBadRequest.WithDetails(fmt.Sprintf("target host: %v", err)), nil
	}
	args.HostUUID = target
	rec, err := tx.VM(ctx, vm)
	switch {
	case errors.Is(err, message.ErrNotFound):
		return err, nil
	case err != nil:
		return nil, err
	case rec.State != cloud.VMCreated && rec.State != cloud.VMRunning && rec.State != cloud.VMStopped:
		return message.ErrConflict.WithDetails(fmt.Sprintf("cannot migrate a VM that is %s; migrate is allowed from created, running, stopped", rec.State)), nil
	case rec.HostUUID == target:
		return message.ErrConflict.WithDetails(fmt.Sprintf("vm %s is on host %s already", vm, target)), nil
	}
	switch _, err := tx.Host(ctx, target); {
	case errors.Is(err, message.ErrNotFound):
		return err, nil
	case err != nil:
		return nil, err
	}
	args.Source = rec.HostUUID
	return nil, nil
}

// failJob ends j with cause's code and text.
func failJob(j *cloud.Job, cause error) {
	j.State, j.Code, j.Error = cloud.JobFailed, string(message.CodeOf(cause)), cause.Error()
}

// prepare handles PrepareMigration on the target host's owner: under its
// claim on the host, the host must be connected and answer a ping; the
// step is recorded in the job. A host that is not connected or does not
// answer fails with message.ErrFailedPrecondition.
func (s *HostService) prepare(ctx context.Context, r *bus.Request, m api.PrepareMigration) (api.MigrationPrepared, error) {
	id := r.Resource()
	jobID, err := message.NormalizeUUID(m.Job)
	if err != nil {
		return api.MigrationPrepared{}, fmt.Errorf("host: prepare a migration: job: %w", err)
	}
	g := fence.Guard{Claim: fence.For(ctx, r).Claim} // no key: the job records the step
	rep, err := cloud.Run(ctx, s.cfg.Store, g, func(ctx context.Context, tx cloud.Store) (api.MigrationPrepared, error) {
		h, err := tx.Host(ctx, id)
		if err != nil {
			return api.MigrationPrepared{}, err
		}
		if h.Status != cloud.HostConnected {
			return api.MigrationPrepared{}, message.ErrFailedPrecondition.WithDetails(fmt.Sprintf("host %s is %s; reconnect it or pick another", id, h.Status))
		}
		if err := tx.Verify(ctx); err != nil {
			return api.MigrationPrepared{}, err
		}
		opCtx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		err = s.cfg.Hypervisor.Ping(opCtx, id)
		cancel()
		if err != nil {
			return api.MigrationPrepared{}, message.ErrFailedPrecondition.WithDetails(fmt.Sprintf("host %s does not answer: %v; pick another", id, err))
		}
		if _, err := tx.UpdateJob(ctx, jobID, func(j *cloud.Job) error {
			if j.Kind != api.JobMigrateVM || j.Resource != m.VM {
				return message.ErrBadRequest.WithDetails(fmt.Sprintf("job %s is a %s job of %s, not a migration of vm %s", jobID, j.Kind, j.Resource, m.VM))
			}
			if j.State == cloud.JobRunning && j.Step == api.StepChecked {
				j.Step, j.Node, j.UpdatedAt = api.StepPrepared, s.node.UUID(), time.Now()
			}
			return nil
		}); err != nil {
			return api.MigrationPrepared{}, err
		}
		return api.MigrationPrepared{Host: h, Handling: handling(r)}, nil
	})
	if err != nil {
		return api.MigrationPrepared{}, stale(s.log, err)
	}
	return rep, nil
}

// resumeJobs sends MigrateVm to this node's own VM service for every
// migration of a VM it owns that is not over: a job whose owner died
// mid-way, or whose message was lost, ends on the VM's next owner (see
// [VMService.runMigration]). The message goes through the bus, which runs
// the messages about one VM one at a time on its owner, so a resumed
// step never overlaps another operation on the VM; a copy queued behind
// a run that ends the job finds it over and changes nothing.
func (s *VMService) resumeJobs(ctx context.Context) {
	jobs, err := s.store.Jobs(ctx)
	if err != nil {
		s.log.Warn("vm sweep: list the jobs; next sweep retries", "err", err)
		return
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			return
		}
		if j.State.Terminal() || j.Kind != api.JobMigrateVM || !s.node.Owns(j.Resource) {
			continue
		}
		if _, busy := s.migrating.Load(j.UUID); busy {
			continue
		}
		args, err := api.ParseMigrateArgs(j.Args)
		if err != nil {
			args.HostUUID = j.Resource // any UUID: the owner fails the job for its args
		}
		if err := service.Send(ctx, s.node, api.MigrateVm{UUID: j.Resource, HostUUID: args.HostUUID, Job: j.UUID}); err != nil {
			s.log.Warn("vm sweep: could not resume a migration job; next sweep retries", "job", j.UUID, "vm", j.Resource, "err", err)
			continue
		}
		s.log.Info("vm sweep: migration job resumed", "job", j.UUID, "vm", j.Resource, "state", j.State, "step", j.Step)
	}
}
