package webhooktest

import "testing"

// The Standard Webhooks specification's published test vector.
func TestVerifyAcceptsTheSpecsTestVector(t *testing.T) {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	id, ts := "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330"
	body := []byte(`{"test": 2432232314}`)
	sig := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	// The vector's timestamp is from 2021: check the MAC without the
	// tolerance by comparing with what Verify computes.
	if err := verifyAt(secret, id, ts, sig, body); err != nil {
		t.Fatal(err)
	}
	if err := verifyAt(secret, id, ts, "v1,Zm9v", body); err == nil {
		t.Fatal("a wrong signature verified")
	}
}
