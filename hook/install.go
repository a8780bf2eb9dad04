package hook

import (
	"errors"
	"fmt"
	"sync"
)

var installMu sync.Mutex // held by Install and undo; guards installed
var installed bool

// Install patches the process for cfg.Mode and returns the function that
// removes every patch again (safe to call more than once, from any
// goroutine). With Mode Off it patches nothing and returns a no-op undo.
//
// Patch in a program's init, before it starts goroutines that do network
// I/O: writing a jump over a function another thread is executing at that
// instant is not safe. Tests that install and undo between their own
// servers' lifetimes are fine.
//
// The TCP Read/Write/Close patches (and, in replay mode, the connect
// redirection) are required: if one cannot be made, nothing stays patched
// and the error wraps ErrUnsupported or ErrPatch. The HTTP transport and
// time.Now patches are optional: a failure there is reported once through
// cfg.Logger, listed in ReadStats().Refused, and the rest works without it.
func Install(cfg Config) (undo func(), err error) {
	rc, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	if rc.Mode == Off {
		return func() {}, nil
	}
	installMu.Lock()
	defer installMu.Unlock()
	if installed {
		return nil, ErrInstalled
	}
	l, err := layout()
	if err != nil {
		return nil, err
	}
	netLayoutP.Store(l)
	e := newEngine(rc, l)

	var undos []func()
	var patched, refused []string
	undoAll := func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}
	required := []func() (target, error){
		func() (target, error) { t := l.read; t.double = connRead; return t, nil },
		func() (target, error) { t := l.write; t.double = connWrite; return t, nil },
		func() (target, error) { t := l.close; t.double = connClose; return t, nil },
	}
	var optional []func() (target, error)
	if rc.Mode == Replay {
		required = append(required, connectTarget)
		optional = append(optional, getsockoptTarget)
		if !rc.NoClock {
			optional = append(optional, clockTarget)
		}
	}
	if !rc.NoHTTP {
		optional = append(optional, transportTarget)
	}
	if !rc.NoResolve {
		optional = append(optional, resolveTarget)
	}
	if !rc.NoGRPC {
		// Both modes: in record mode the write hook removes the in-band
		// field before the real server sees it (h2out.go).
		optional = append(optional, grpcReadTarget, grpcTarget)
	}
	// Randomness: optional too, each source on its own.
	var randomTargets []func() ([]target, error)
	if rc.Random != RandomOff {
		randomTargets = append(randomTargets, mathTargets)
	}
	if rc.Random == RandomAll {
		randomTargets = append(randomTargets, cryptoTargets)
	}
	for _, mk := range required {
		t, err := mk()
		if err == nil {
			var u func()
			if u, err = apply(t); err == nil {
				undos = append(undos, u)
				patched = append(patched, t.name)
				continue
			}
		}
		undoAll()
		if !errors.Is(err, ErrUnsupported) {
			err = fmt.Errorf("%w: %w", ErrPatch, err)
		}
		e.log.Error("retrace: agent not installed", "mode", rc.Mode.String(), "err", err)
		return nil, err
	}
	for _, mk := range optional {
		t, err := mk()
		if err == nil {
			var u func()
			if u, err = apply(t); err == nil {
				undos = append(undos, u)
				patched = append(patched, t.name)
				if t.name == "time.Now" {
					e.clock = true
				}
				continue
			}
		}
		if errors.Is(err, errNotLinked) {
			continue // nothing to patch: the program does not use it
		}
		refused = append(refused, err.Error())
		e.log.Error("retrace: function left unpatched", "err", err)
	}
	if !rc.NoHTTP {
		// net/http's HTTP/2 servers: their handlers bound to their
		// streams' traces (h2serve.go); each server's patch on its own
		if ts, err := h2ServeTargets(); err == nil {
			for _, t := range ts {
				if u, err := apply(t); err != nil {
					refused = append(refused, err.Error())
					e.log.Error("retrace: function left unpatched", "err", err)
				} else {
					undos = append(undos, u)
					patched = append(patched, t.name)
				}
			}
		} else if !errors.Is(err, errNotLinked) {
			refused = append(refused, err.Error())
			e.log.Error("retrace: function left unpatched", "err", err)
		}
	}
	if !rc.NoTLS {
		if err := installTLS(&undos, &patched); err != nil {
			refused = append(refused, err.Error())
			e.log.Error("retrace: TLS left unhooked: its connections are followed as TCP", "err", err)
		} else {
			e.tls = true
		}
	}
	for i, mk := range randomTargets {
		ts, err := mk()
		var applied []func()
		for _, t := range ts {
			var u func()
			if u, err = apply(t); err != nil {
				break
			}
			applied = append(applied, u)
		}
		if err != nil {
			// a source half patched would draw half from the seed
			for j := len(applied) - 1; j >= 0; j-- {
				applied[j]()
			}
			refused = append(refused, err.Error())
			e.log.Error("retrace: randomness left unpatched", "err", err)
			continue
		}
		undos = append(undos, applied...)
		for _, t := range ts {
			patched = append(patched, t.name)
		}
		if len(ts) > 0 {
			if i == 0 {
				e.mathPatched = true
			} else {
				e.cryptoPatched = true
			}
		}
	}
	e.log.Info("retrace: agent installed", "mode", rc.Mode.String(), "patched", patched)
	patchState.Lock()
	patchState.mode, patchState.patched, patchState.refused = rc.Mode, patched, refused
	patchState.Unlock()
	active.Store(e)
	installed = true

	var once sync.Once
	return func() {
		once.Do(func() {
			installMu.Lock()
			defer installMu.Unlock()
			active.CompareAndSwap(e, nil)
			undoAll()
			e.shutdown()
			patchState.Lock()
			patchState.mode, patchState.patched, patchState.refused = Off, nil, nil
			patchState.Unlock()
			installed = false
		})
	}, nil
}

// installTLS patches crypto/tls (tls.go): the three patches or none, since
// a handshake hooked without the Read and Write hooks would leave a
// replayed connection without TLS to speak.
func installTLS(undos *[]func(), patched *[]string) error {
	ts, err := tlsTargets()
	if err != nil {
		return err
	}
	var mine []func()
	for _, t := range ts {
		u, err := apply(t)
		if err != nil {
			for i := len(mine) - 1; i >= 0; i-- {
				mine[i]()
			}
			return err
		}
		mine = append(mine, u)
	}
	*undos = append(*undos, mine...)
	for _, t := range ts {
		*patched = append(*patched, t.name)
	}
	return nil
}
