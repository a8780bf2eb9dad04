package hook

import (
	"bytes"
	"net/http"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// methodWord finds exported and unexported methods by walking the method
// table, to the function the runtime names.
func TestMethodWord(t *testing.T) {
	for _, tc := range []struct {
		typ        reflect.Type
		name, want string
	}{
		{reflect.TypeFor[*http.Transport](), "roundTrip", "net/http.(*Transport).roundTrip"},
		{reflect.TypeFor[*http.Transport](), "RoundTrip", "net/http.(*Transport).RoundTrip"},
		{reflect.TypeFor[*bytes.Buffer](), "grow", "bytes.(*Buffer).grow"},
	} {
		word := methodWord(tc.typ, tc.name)
		require.NotNil(t, word, tc.name)
		assert.NoError(t, checkName(target{name: tc.want, word: word}))
	}
	assert.Nil(t, methodWord(reflect.TypeFor[*http.Transport](), "noSuchMethod"))
	assert.Nil(t, methodWord(reflect.TypeFor[http.Transport](), "roundTrip"), "not a pointer type")
	assert.Nil(t, methodWord(reflect.TypeFor[*int](), "String"), "no methods")
}
