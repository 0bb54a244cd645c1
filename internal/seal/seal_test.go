package seal

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSeal(t *testing.T) {
	s, err := New(bytes.Repeat([]byte{'k'}, 32))
	require.NoError(t, err)
	plain := []byte("whsec_needle")
	sealed := s.Seal(plain, ADSecret("a"))
	require.False(t, bytes.Contains(sealed, plain))
	require.NotEqual(t, sealed, s.Seal(plain, ADSecret("a")), "a fresh nonce each time")

	got, err := s.Open(sealed, ADSecret("a"))
	require.NoError(t, err)
	require.Equal(t, plain, got)

	_, err = s.Open(sealed, ADSecret("b"))
	require.ErrorContains(t, err, "cannot decrypt", "a value copied to another row does not open")
	other, err := New(bytes.Repeat([]byte{'x'}, 32))
	require.NoError(t, err)
	_, err = other.Open(sealed, ADSecret("a"))
	require.ErrorContains(t, err, "cannot decrypt", "the wrong key")
	_, err = s.Open(sealed[:5], ADSecret("a"))
	require.ErrorContains(t, err, "truncated")
}

func TestNilSealerKeepsPlaintext(t *testing.T) {
	var s *Sealer
	require.Equal(t, []byte("x"), s.Seal([]byte("x"), ADSigningKey))
	got, err := s.Open([]byte("x"), ADSigningKey)
	require.NoError(t, err)
	require.Equal(t, []byte("x"), got)
}

func TestNewRejectsShortKey(t *testing.T) {
	_, err := New(make([]byte, 16))
	require.ErrorContains(t, err, "32 bytes")
}
