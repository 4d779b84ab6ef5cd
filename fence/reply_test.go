package fence_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/message"
)

type vmReply struct {
	State string `json:"state"`
	Seen  int    `json:"seen,omitempty"`
	Local string `json:"-"`
}

func TestMarshalReply(t *testing.T) {
	k := fence.NewKey(message.NewUUID(), "test.v1.StartVm", []byte(`{}`))
	data, replay, err := fence.MarshalReply(k, vmReply{State: "running", Local: "x"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"state":"running"}`, string(data))
	assert.Equal(t, vmReply{State: "running"}, replay, "what a repeat gets: Local is not recorded")
	got, err := fence.UnmarshalReply[vmReply](k, data)
	require.NoError(t, err)
	assert.Equal(t, replay, got)

	// Other kinds of T.
	b, bs, err := fence.MarshalReply(k, []byte("raw"))
	require.NoError(t, err)
	assert.Equal(t, `"cmF3"`, string(b))
	assert.Equal(t, []byte("raw"), bs)
	p, pv, err := fence.MarshalReply[*vmReply](fence.Key{}, nil)
	require.NoError(t, err)
	assert.Equal(t, "null", string(p))
	assert.Nil(t, pv)

	_, _, err = fence.MarshalReply(k, make(chan int))
	require.ErrorIs(t, err, message.ErrInternal)
	assert.Contains(t, err.Error(), "chan int")
	assert.Contains(t, err.Error(), k.ID)
}

func TestUnmarshalReplyIsStrict(t *testing.T) {
	k := fence.NewKey(message.NewUUID(), "test.v1.StartVm", []byte(`{}`))
	got, err := fence.UnmarshalReply[vmReply](k, []byte(`{"state":"running"} `))
	require.NoError(t, err, "a field T has but the reply lacks is zero (T gained a field)")
	assert.Equal(t, vmReply{State: "running"}, got)
	for name, data := range map[string]string{
		"a field T lacks":          `{"state":"running","host":"h1"}`,
		"another JSON type":        `["running"]`,
		"data after the value":     `{"state":"running"}{}`,
		"empty (Do recorded none)": ``,
		"not JSON":                 `running`,
	} {
		got, err := fence.UnmarshalReply[vmReply](k, []byte(data))
		require.ErrorIs(t, err, message.ErrBadReply, name)
		assert.Equal(t, vmReply{}, got, "%s: no partial value", name)
		assert.Contains(t, err.Error(), "fence_test.vmReply", name)
		assert.Contains(t, err.Error(), k.ID, name)
	}
}
