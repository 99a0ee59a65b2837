//! The key secrets on the emulator (issue 9, item 8): only the key-rotator's maintenance
//! writes them; the functions that sign read the signing keys and the management API reads
//! the public keys, both without writing, waiting briefly for a first key and then failing
//! clearly.

mod common;

use std::time::Duration;

use common::Stack;
use pricing_aws::secrets::{
    SecretsError, load_public_keys, load_signing_keys, maintain_signing_keys, publish_public_keys,
};
use pricing_core::jws::{PublicKey, PublishedKeys, Signer, StoredKey};
use pricing_core::time::Timestamp;

async fn secret_string(client: &aws_sdk_secretsmanager::Client, id: &str) -> String {
    client
        .get_secret_value()
        .secret_id(id)
        .send()
        .await
        .expect("read the secret")
        .secret_string()
        .unwrap_or_default()
        .to_owned()
}

async fn versions(client: &aws_sdk_secretsmanager::Client, id: &str) -> usize {
    client
        .list_secret_version_ids()
        .secret_id(id)
        .send()
        .await
        .expect("list versions")
        .versions()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_write_and_fail_clearly_until_the_rotator_stores_a_key() {
    let stack = Stack::new("keys-readonly").await;
    let client = stack.secrets();
    let signing = &stack.config.signing_keys_secret_id;
    let public = &stack.config.public_keys_secret_id;
    let (signing_versions, public_versions) = (
        versions(&client, signing).await,
        versions(&client, public).await,
    );

    // A cold start before the first key: waits, then names the missing step.
    let wait = Duration::from_millis(300);
    let err = load_signing_keys(&client, signing, wait)
        .await
        .expect_err("no key yet");
    assert!(matches!(err, SecretsError::NoKeyYet { .. }), "{err}");
    assert!(err.to_string().contains("key-rotator"), "{err}");
    let err = load_public_keys(&client, public, wait)
        .await
        .expect_err("no public key yet");
    assert!(matches!(err, SecretsError::NoKeyYet { .. }), "{err}");
    assert_eq!(
        secret_string(&client, signing).await,
        "[]",
        "nothing written"
    );
    assert_eq!(secret_string(&client, public).await, "[]");
    assert_eq!(versions(&client, signing).await, signing_versions);
    assert_eq!(versions(&client, public).await, public_versions);

    // A cold start waiting while the rotator stores the first key gets it.
    let waiting = {
        let client = client.clone();
        let signing = signing.clone();
        tokio::spawn(
            async move { load_signing_keys(&client, &signing, Duration::from_secs(30)).await },
        )
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let done = maintain_signing_keys(&client, signing, public, None, Timestamp::now())
        .await
        .expect("the rotator bootstraps");
    assert_eq!(
        (done.kids.len(), done.rotated, done.published),
        (1, None, true)
    );
    let keys = waiting
        .await
        .expect("join")
        .expect("the waiting reader gets the key");
    assert_eq!(
        keys.iter().map(|k| k.kid.clone()).collect::<Vec<_>>(),
        done.kids
    );

    // The public secret holds the public halves only, as the signer publishes them.
    let signer = Signer::from_keys(&keys).expect("a signer");
    let published = load_public_keys(&client, public, Duration::ZERO)
        .await
        .expect("public keys");
    assert_eq!(published, signer.public_keys());
    let text = secret_string(&client, public).await;
    assert!(
        !text.contains("pkcs8") && !text.contains(keys[0].pkcs8.as_deref().expect("private")),
        "{text}"
    );
    assert_eq!(
        PublishedKeys::from_keys(&published).expect("usable").jwks(),
        signer.jwks()
    );

    // Reading changes nothing; maintenance with nothing to do writes nothing.
    let (signing_versions, public_versions) = (
        versions(&client, signing).await,
        versions(&client, public).await,
    );
    load_signing_keys(&client, signing, Duration::ZERO)
        .await
        .expect("read");
    load_public_keys(&client, public, Duration::ZERO)
        .await
        .expect("read");
    let again = maintain_signing_keys(
        &client,
        signing,
        public,
        Some(Duration::from_secs(86_400)),
        Timestamp::now(),
    )
    .await
    .expect("maintain");
    assert_eq!((again.rotated, again.published), (None, false));
    assert_eq!(versions(&client, signing).await, signing_versions);
    assert_eq!(versions(&client, public).await, public_versions);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_is_published_and_a_damaged_public_secret_repaired() {
    let stack = Stack::new("keys-publish").await;
    let client = stack.secrets();
    let signing = &stack.config.signing_keys_secret_id;
    let public = &stack.config.public_keys_secret_id;
    maintain_signing_keys(&client, signing, public, None, Timestamp::now())
        .await
        .expect("bootstrap");

    let rotated = maintain_signing_keys(
        &client,
        signing,
        public,
        Some(Duration::ZERO),
        Timestamp::now(),
    )
    .await
    .expect("rotate");
    let new = rotated.rotated.expect("rotated");
    assert!(rotated.published);
    let published: Vec<PublicKey> = load_public_keys(&client, public, Duration::ZERO)
        .await
        .expect("public keys");
    let kids: Vec<&str> = published.iter().map(|k| k.kid.as_str()).collect();
    assert_eq!(kids.len(), 2);
    assert_eq!(kids[1], new);

    // A damaged public secret is rewritten from the signing keys.
    client
        .put_secret_value()
        .secret_id(public)
        .secret_string("not json")
        .send()
        .await
        .expect("damage");
    assert!(
        publish_public_keys(&client, signing, public)
            .await
            .expect("repair")
    );
    assert_eq!(
        load_public_keys(&client, public, Duration::ZERO)
            .await
            .expect("public keys"),
        published
    );
    assert!(
        !publish_public_keys(&client, signing, public)
            .await
            .expect("nothing to do"),
        "an up-to-date public secret is not written again"
    );

    // The public keys verify what the signing keys sign.
    let keys: Vec<StoredKey> = load_signing_keys(&client, signing, Duration::ZERO)
        .await
        .expect("keys");
    let signer = Signer::from_keys(&keys).expect("signer");
    let verifier = PublishedKeys::from_keys(&published).expect("verifier");
    assert!(verifier.verify_jws(&signer.sign_jws(b"{}")));
}

/// A key retired long ago keeps only its public point in the signing secret, stays in the
/// public one, and what it signed still verifies there (what the management API serves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_retired_long_ago_is_kept_public_only_and_still_verifies() {
    let stack = Stack::new("keys-public-only").await;
    let client = stack.secrets();
    let signing = &stack.config.signing_keys_secret_id;
    let public = &stack.config.public_keys_secret_id;
    let t0 = Timestamp::from_millis(Timestamp::now().millis() - 30 * 86_400_000).expect("t0");
    let day = |d: i64| Timestamp::from_millis(t0.millis() + d * 86_400_000).expect("a day");
    maintain_signing_keys(&client, signing, public, None, t0)
        .await
        .expect("bootstrap");
    let first = load_signing_keys(&client, signing, Duration::ZERO)
        .await
        .expect("keys");
    let signed = Signer::from_keys(&first).expect("signer").sign_jws(b"{}");
    for d in [1, 9] {
        maintain_signing_keys(&client, signing, public, Some(Duration::ZERO), day(d))
            .await
            .expect("rotate");
    }
    let keys = load_signing_keys(&client, signing, Duration::ZERO)
        .await
        .expect("keys");
    let kept: Vec<(bool, bool)> = keys
        .iter()
        .map(|k| (k.pkcs8.is_some(), k.public.is_some()))
        .collect();
    assert_eq!(kept, [(false, true), (true, false), (true, false)]);
    let published = load_public_keys(&client, public, Duration::ZERO)
        .await
        .expect("public keys");
    assert_eq!(published.len(), 3);
    assert_eq!(published[0].kid, first[0].kid);
    assert!(
        PublishedKeys::from_keys(&published)
            .expect("usable")
            .verify_jws(&signed)
    );
    assert!(
        !publish_public_keys(&client, signing, public)
            .await
            .expect("nothing to do"),
        "the public secret agrees with the signing keys"
    );
}

/// Every due rotation rotates, however many came before: the put's request token (which
/// the service makes the new version's id) stays a bounded function of the version read,
/// so a long chain of rotations never repeats a token and never reads as "another run
/// rotated".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotations_keep_rotating_after_many_versions() {
    let stack = Stack::new("keys-many").await;
    let client = stack.secrets();
    let signing = &stack.config.signing_keys_secret_id;
    let public = &stack.config.public_keys_secret_id;
    maintain_signing_keys(&client, signing, public, None, Timestamp::now())
        .await
        .expect("bootstrap");
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..14 {
        let m = maintain_signing_keys(
            &client,
            signing,
            public,
            Some(Duration::ZERO),
            Timestamp::now(),
        )
        .await
        .expect("rotate");
        let kid = m
            .rotated
            .unwrap_or_else(|| panic!("round {round}: no rotation"));
        assert!(seen.insert(kid.clone()), "round {round}: {kid} again");
        assert_eq!(m.kids.last(), Some(&kid), "round {round}");
    }
}
