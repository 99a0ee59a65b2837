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
    TenantId
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
    /// Tenants come from verified tokens; they only need to be non-empty and bounded.
    pub fn from_claim(s: &str) -> Option<Self> {
        (!s.is_empty() && s.len() <= 256).then(|| Self(s.to_owned()))
    }
}

/// The address of one pricing instance.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceKey {
    pub project_id: ProjectId,
    pub instance_id: InstanceId,
}

impl InstanceKey {
    pub fn new(project_id: ProjectId, instance_id: InstanceId) -> Self {
        Self {
            project_id,
            instance_id,
        }
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

    #[test]
    fn accepts_the_documented_charset() {
        assert!(ItemId::parse("A-z_0.9:~x").is_ok());
        assert_eq!(ItemId::parse(""), Err(IdError::Length));
        assert_eq!(ItemId::parse("a".repeat(129)), Err(IdError::Length));
        assert!(ItemId::parse("a".repeat(128)).is_ok());
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
