// Package dedup holds the exactly-once core of the gateway: the keys that
// identify a delivery and the claim contract every store implements.
package dedup

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// Key identifies one logical delivery: 64 lowercase hex characters of a
// SHA-256 digest. Keys are opaque to stores.
type Key string

// transportKeyTag versions the transport key encoding. Changing the encoding
// in any way requires a new tag, otherwise keys stored by an older gateway
// would stop matching retransmissions received by a newer one.
const transportKeyTag = "gateway/transport-key/v1"

// TransportKey derives the transport dedup key of a message: the protocol
// ("as2", "as4"), the sender's identifier type (the AS2 scheme "as2", or the
// eb:PartyId type) and identifier, and the message id (AS2 Message-ID or
// eb:MessageId).
//
// Encoding: SHA-256 over the tag and then each field, every one written as a
// 4-byte big-endian length followed by its bytes. Length prefixes make the
// encoding unambiguous: ("ab","c") and ("a","bc") never collide. The message
// id is normalised with NormalizeMessageID first; the other fields are used
// as given (identifiers are case sensitive in both AS2 and ebMS).
func TransportKey(protocol, senderType, senderID, messageID string) Key {
	return hashFields(transportKeyTag, protocol, senderType, senderID, NormalizeMessageID(messageID))
}

// NormalizeMessageID removes surrounding white space and one pair of angle
// brackets, so that "<abc@host>" and "abc@host" (IBM Sterling's spelling) are
// the same message.
func NormalizeMessageID(id string) string {
	id = strings.TrimSpace(id)
	if len(id) >= 2 && id[0] == '<' && id[len(id)-1] == '>' {
		id = strings.TrimSpace(id[1 : len(id)-1])
	}
	return id
}

// HashFields is the length-prefixed SHA-256 encoding shared by every key kind.
// The tag names the kind and version of key.
func HashFields(tag string, fields ...string) Key { return hashFields(tag, fields...) }

func hashFields(tag string, fields ...string) Key {
	h := sha256.New()
	var n [4]byte
	for _, f := range append([]string{tag}, fields...) {
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return Key(hex.EncodeToString(h.Sum(nil)))
}

// Valid reports whether k has the form of a key.
func (k Key) Valid() bool {
	if len(k) != 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
