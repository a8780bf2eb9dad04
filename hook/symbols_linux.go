package hook

import (
	"debug/elf"
	"debug/gosym"
	"fmt"
	"reflect"
	"runtime"
	"sync"
)

// funcsByName returns the entry addresses, in this process, of the named
// functions (0 for one that is not linked), found in the executable's
// pclntab. The agent cannot name the functions of packages it must not
// import (grpc-go); their names are stable API of those packages'
// internals, and every address found is checked against the runtime's own
// function table before use.
func funcsByName(names ...string) ([]uintptr, error) {
	tab, delta, err := loadSymbols()
	if err != nil {
		return nil, err
	}
	out := make([]uintptr, len(names))
	for i, n := range names {
		f := tab.LookupFunc(n)
		if f == nil {
			continue
		}
		pc := uintptr(int64(f.Entry) + delta)
		if rf := runtime.FuncForPC(pc); rf == nil || rf.Entry() != pc || rf.Name() != n {
			return nil, fmt.Errorf("%w: %s found at %#x in the executable but not there in the process", ErrUnsupported, n, pc)
		}
		out[i] = pc
	}
	return out, nil
}

var symbols struct {
	once  sync.Once
	tab   *gosym.Table
	delta int64
	err   error
}

// loadSymbols reads the executable's pclntab once, and the offset of the
// process's text from the file's (a position-independent executable is
// loaded anywhere).
func loadSymbols() (*gosym.Table, int64, error) {
	s := &symbols
	s.once.Do(func() {
		f, err := elf.Open("/proc/self/exe")
		if err != nil {
			s.err = fmt.Errorf("%w: reading the executable's symbols: %w", ErrUnsupported, err)
			return
		}
		defer f.Close()
		pcln, text := f.Section(".gopclntab"), f.Section(".text")
		if pcln == nil || text == nil {
			s.err = fmt.Errorf("%w: the executable has no .gopclntab or .text section", ErrUnsupported)
			return
		}
		data, err := pcln.Data()
		if err != nil {
			s.err = fmt.Errorf("%w: reading .gopclntab: %w", ErrUnsupported, err)
			return
		}
		tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
		if err != nil {
			s.err = fmt.Errorf("%w: parsing .gopclntab: %w", ErrUnsupported, err)
			return
		}
		self := runtime.FuncForPC(reflect.ValueOf(loadSymbols).Pointer())
		sf := tab.LookupFunc(self.Name())
		if sf == nil {
			s.err = fmt.Errorf("%w: %s is not in the executable's pclntab", ErrUnsupported, self.Name())
			return
		}
		s.tab, s.delta = tab, int64(self.Entry())-int64(sf.Entry)
	})
	return s.tab, s.delta, s.err
}
