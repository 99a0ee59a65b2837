//! Validated identifiers. An id cannot exist in an invalid form.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// Why a string is not a valid id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("must be 1 to 128 characters long")]
    Length,
    #[error("may only contain A-Z a-z 0-9 . _ : ~ -")]
    Charset,
    #[error("may not be . or .. (a URL path reads them as the current and parent segment)")]
    DotSegment,
    #[error("must be 1 to 256 bytes long")]
    TenantLength,
}

/// Checks the id rule shared by every client-supplied id (DESIGN.md section 3).
pub fn check_id(s: &str) -> Result<(), IdError> {
    if s.is_empty() || s.len() > 128 {
        return Err(IdError::Length);
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'~' | b'-'))
    {
        return Err(IdError::Charset);
    }
    Ok(())
}

/// The rule for a new id that will be a URL path segment (`/projects/{projectId}/...`),
/// checked where such an id is created (a project, an instance, a registration, a price
/// match) and not where one is read: not `.` or `..`, which no normalising client or
/// browser sends as a segment. Ids stored before the rule still parse.
pub fn check_new_path_id(s: &str) -> Result<(), IdError> {
    if s == "." || s == ".." {
        return Err(IdError::DotSegment);
    }
    Ok(())
}

/// The rule for a tenant: what a verified token's `tenant` or `sub` claim may be, any
/// text of 1 to 256 bytes (an identity provider's subject, such as `abc@clients` or
/// `auth0|123`). The same rule reads a stored one back: a stricter one refused the records
/// of tenants the token check had let in, and every read of their instances failed.
pub fn check_tenant(s: &str) -> Result<(), IdError> {
    if s.is_empty() || s.len() > 256 {
        return Err(IdError::TenantLength);
    }
    Ok(())
}

/// Ids parsed from client strings.
pub trait ParseId: Sized {
    fn parse_id(s: &str) -> Result<Self, IdError>;
}

/// Transaction ids follow the id rule, or are derived from a request id as
/// `{requestId}#{index}` (DESIGN.md section 5). The derived form is stored inside the signed
/// entry, so it must parse again when the log is replayed or the entry resubmitted.
pub fn check_transaction_id(s: &str) -> Result<(), IdError> {
    match s.rsplit_once('#') {
        Some((request_id, index))
            if !index.is_empty()
                && index.len() <= 4
                && index.bytes().all(|b| b.is_ascii_digit()) =>
        {
            if s.len() > 128 {
                return Err(IdError::Length);
            }
            check_id(request_id)
        }
        _ => check_id(s),
    }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        id_type!($(#[$doc])* $name, check_id);
    };
    ($(#[$doc:meta])* $name:ident, $check:path) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn parse(s: impl Into<String>) -> Result<Self, IdError> {
                let s = s.into();
                $check(&s)?;
                Ok(Self(s))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl ParseId for $name {
            fn parse_id(s: &str) -> Result<Self, IdError> {
                Self::parse(s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::parse(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

id_type!(
    /// A project; generated (ULID) unless the client names it.
    ProjectId
);
id_type!(
    /// A pricing instance within a project.
    InstanceId
);
id_type!(ItemId);
id_type!(ProductId);
id_type!(
    /// Deduplicates entries per instance. Client ids, or `{requestId}#{index}`.
    TransactionId,
    check_transaction_id
);
id_type!(MatchId);
id_type!(
    /// A webhook subscription (project or instance level); generated (ULID).
    SubscriptionId
);
id_type!(
    /// The tenant that owns projects: the `tenant` or `sub` claim of the caller's token.
    TenantId,
    check_tenant
);

impl ProjectId {
    pub fn generate() -> Self {
        Self(ulid::Ulid::new().to_string())
    }
}

impl InstanceId {
    pub fn generate() -> Self {
        Self(ulid::Ulid::new().to_string())
    }
}

impl SubscriptionId {
    pub fn generate() -> Self {
        Self(ulid::Ulid::new().to_string())
    }
}

impl TenantId {
    /// Tenants come from verified tokens; they only need to be non-empty and bounded
    /// ([`check_tenant`]).
    pub fn from_claim(s: &str) -> Option<Self> {
        Self::parse(s).ok()
    }

    /// The tenant as a key component: id characters other than `~` as they are, every
    /// other byte as `~XX` (upper-case hex). Never contains `/` or `#`, and distinct tenants
    /// give distinct keys.
    pub fn key_component(&self) -> String {
        let mut out = String::with_capacity(self.0.len());
        for b in self.0.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-') {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("~{b:02X}"));
            }
        }
        out
    }

    /// The inverse of [`TenantId::key_component`].
    pub fn from_key_component(s: &str) -> Option<Self> {
        let mut bytes = Vec::with_capacity(s.len());
        let mut rest = s.as_bytes();
        while let Some((&b, tail)) = rest.split_first() {
            if b == b'~' {
                let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
                bytes.push(u8::from_str_radix(hex, 16).ok()?);
                rest = &tail[2..];
            } else {
                bytes.push(b);
                rest = tail;
            }
        }
        Self::from_claim(&String::from_utf8(bytes).ok()?)
    }
}

/// `{tenant}/{project}`, the tenant as [`TenantId::key_component`]: the one definition of a
/// project's storage key, for [`ProjectKey`] and [`InstanceKey`] alike.
fn project_storage_key(tenant: &TenantId, project: &ProjectId) -> String {
    format!("{}/{}", tenant.key_component(), project)
}

/// The address of one project: project ids are scoped by tenant (two tenants may both
/// have a project `summer`; neither can see, squat or learn the other's).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectKey {
    pub tenant: TenantId,
    pub project_id: ProjectId,
}

impl ProjectKey {
    pub fn new(tenant: TenantId, project_id: ProjectId) -> Self {
        Self { tenant, project_id }
    }

    pub fn instance(&self, instance_id: InstanceId) -> InstanceKey {
        InstanceKey::new(self.tenant.clone(), self.project_id.clone(), instance_id)
    }

    /// The project as one storage key component: `{tenant}/{project}`, the tenant as
    /// [`TenantId::key_component`]. Contains exactly one `/` and no `#`.
    pub fn storage_key(&self) -> String {
        project_storage_key(&self.tenant, &self.project_id)
    }

    /// The inverse of [`ProjectKey::storage_key`].
    pub fn from_storage_key(s: &str) -> Option<Self> {
        let (tenant, project) = s.split_once('/')?;
        Some(Self::new(
            TenantId::from_key_component(tenant)?,
            ProjectId::parse(project).ok()?,
        ))
    }
}

impl fmt::Display for ProjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.project_id)
    }
}

/// The address of one pricing instance: its tenant, project and id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceKey {
    pub tenant: TenantId,
    pub project_id: ProjectId,
    pub instance_id: InstanceId,
}

impl InstanceKey {
    pub fn new(tenant: TenantId, project_id: ProjectId, instance_id: InstanceId) -> Self {
        Self {
            tenant,
            project_id,
            instance_id,
        }
    }

    pub fn project(&self) -> ProjectKey {
        ProjectKey::new(self.tenant.clone(), self.project_id.clone())
    }

    /// Its project's [`ProjectKey::storage_key`].
    pub fn project_storage_key(&self) -> String {
        project_storage_key(&self.tenant, &self.project_id)
    }

    /// The instance as one storage key component: `{tenant}/{project}/{instance}`.
    pub fn storage_key(&self) -> String {
        format!("{}/{}", self.project_storage_key(), self.instance_id)
    }

    /// The inverse of [`InstanceKey::storage_key`].
    pub fn from_storage_key(s: &str) -> Option<Self> {
        let (project, instance) = s.rsplit_once('/')?;
        let project = ProjectKey::from_storage_key(project)?;
        Some(project.instance(InstanceId::parse(instance).ok()?))
    }
}

impl fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.project_id, self.instance_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tenant a token may name reads back from a stored record (a model instance,
    /// a queue message), not only from its storage key.
    #[test]
    fn every_tenant_a_token_may_name_deserializes() {
        for t in [
            "abc@clients",
            "auth0|123",
            "acme x",
            "é ü\n",
            &"a".repeat(256),
        ] {
            let tenant = TenantId::from_claim(t).unwrap();
            let json = serde_json::to_string(&tenant).unwrap();
            assert_eq!(serde_json::from_str::<TenantId>(&json).unwrap(), tenant);
        }
        for t in ["", &"a".repeat(257)] {
            assert!(TenantId::from_claim(t).is_none());
            let json = serde_json::to_string(t).unwrap();
            assert!(serde_json::from_str::<TenantId>(&json).is_err());
        }
    }

    #[test]
    fn storage_keys_round_trip_and_keep_tenants_apart() {
        let tenant = |s: &str| TenantId::from_claim(s).unwrap();
        let project = ProjectId::parse("summer").unwrap();
        for t in ["acme", "a/b", "a~2Fb", "x#y", "é ü", "~", "client:1.a-b_c"] {
            let key = ProjectKey::new(tenant(t), project.clone());
            let stored = key.storage_key();
            assert_eq!(stored.matches('/').count(), 1, "{stored}");
            assert!(!stored.contains('#'), "{stored}");
            assert_eq!(ProjectKey::from_storage_key(&stored), Some(key.clone()));
            let instance = key.instance(InstanceId::parse("day-1").unwrap());
            assert_eq!(
                InstanceKey::from_storage_key(&instance.storage_key()),
                Some(instance)
            );
        }
        // `a/b` and `a~2Fb` are different tenants and must not share a key.
        assert_ne!(
            ProjectKey::new(tenant("a/b"), project.clone()).storage_key(),
            ProjectKey::new(tenant("a~2Fb"), project.clone()).storage_key()
        );
        assert_eq!(TenantId::from_key_component("~4"), None);
        assert_eq!(TenantId::from_key_component("~ZZ"), None);
    }

    #[test]
    fn accepts_the_documented_charset() {
        assert!(ItemId::parse("A-z_0.9:~x").is_ok());
        assert_eq!(ItemId::parse(""), Err(IdError::Length));
        assert_eq!(ItemId::parse("a".repeat(129)), Err(IdError::Length));
        assert!(ItemId::parse("a".repeat(128)).is_ok());
        for dots in [".", ".."] {
            assert_eq!(check_new_path_id(dots), Err(IdError::DotSegment));
            // One stored before the rule still parses, from storage or a URL.
            let stored: ItemId = serde_json::from_value(serde_json::json!(dots)).unwrap();
            assert_eq!(stored.as_str(), dots);
            assert!(ProjectId::parse(dots).is_ok());
        }
        assert!(check_new_path_id("...").is_ok());
        assert!(check_new_path_id(".a").is_ok());
        assert_eq!(ItemId::parse("a b"), Err(IdError::Charset));
        assert_eq!(ItemId::parse("a/b"), Err(IdError::Charset));
        assert_eq!(ItemId::parse("é"), Err(IdError::Charset));
    }

    #[test]
    fn transaction_ids_may_be_derived_from_a_request_id() {
        assert!(TransactionId::parse("req-1#0").is_ok());
        assert!(TransactionId::parse("req-1#999").is_ok());
        assert!(TransactionId::parse(format!("{}#999", "r".repeat(100))).is_ok());
        assert_eq!(TransactionId::parse("#1"), Err(IdError::Length));
        assert_eq!(TransactionId::parse("a#"), Err(IdError::Charset));
        assert_eq!(TransactionId::parse("a#b"), Err(IdError::Charset));
        assert_eq!(TransactionId::parse("a#1#2"), Err(IdError::Charset));
        assert_eq!(TransactionId::parse("a b#1"), Err(IdError::Charset));
        assert_eq!(TransactionId::parse("a#12345"), Err(IdError::Charset));
        assert_eq!(
            TransactionId::parse(format!("{}#1", "r".repeat(127))),
            Err(IdError::Length)
        );
        // Other ids keep the plain rule.
        assert_eq!(ItemId::parse("a#1"), Err(IdError::Charset));
    }

    #[test]
    fn deserialization_validates() {
        assert!(serde_json::from_str::<ItemId>("\"ok\"").is_ok());
        assert!(serde_json::from_str::<ItemId>("\"not ok\"").is_err());
    }

    #[test]
    fn generated_ids_are_valid_and_sortable() {
        let a = ProjectId::generate();
        assert!(check_id(a.as_str()).is_ok());
        assert_eq!(a.as_str().len(), 26);
    }
}
