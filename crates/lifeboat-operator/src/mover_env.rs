//! Which environment variables of a mover Job are Lifeboat's own.
//!
//! A restore's `restore-env` and a BackupPolicy method's `env` are appended to the Job's
//! environment, and in a container the later of two equal names wins. A user variable named like
//! one of Lifeboat's would silently redirect the mover: another repo, another target directory,
//! another set of credentials. So such a name is refused, naming the variable.

use k8s_openapi::api::core::v1::EnvVar;

/// The variables Lifeboat sets on mover Jobs (and the mover's own knobs that decide what is
/// written or trusted).
const RESERVED: &[&str] = &[
    "LIFEBOAT_BACKUP_NAME",
    "LIFEBOAT_COMPONENT",
    "LIFEBOAT_CONTENT_CHECK",
    "LIFEBOAT_DATA_DIR",
    "LIFEBOAT_DRILL_DIR",
    "LIFEBOAT_LOG",
    "LIFEBOAT_LOG_FORMAT",
    "LIFEBOAT_MANAGER_PORT",
    "LIFEBOAT_REDIS_HOST",
    "LIFEBOAT_REDIS_PASSWORD",
    "LIFEBOAT_REDIS_PASSWORD_FILE",
    "LIFEBOAT_REDIS_PORT",
    "LIFEBOAT_REDIS_USERNAME",
    "LIFEBOAT_REPO",
    "LIFEBOAT_S3_CA_BUNDLE",
    "LIFEBOAT_S3_CREDENTIALS_DIR",
    "LIFEBOAT_S3_ENDPOINT",
    "LIFEBOAT_S3_REGION",
    "LIFEBOAT_S3_VIRTUAL_HOSTED_STYLE",
    "LIFEBOAT_SCRATCH_MODULES",
    "LIFEBOAT_SCRATCH_SERVER",
    "LIFEBOAT_TARGET_DIR",
    "LIFEBOAT_VERIFY_HOSTS",
];

/// The S3 client reads every `AWS_*` variable (endpoint, credentials, region), so the whole
/// prefix is Lifeboat's.
const RESERVED_PREFIX: &str = "AWS_";

/// True when `name` is one of Lifeboat's mover variables.
pub fn is_reserved(name: &str) -> bool {
    RESERVED.contains(&name) || name.starts_with(RESERVED_PREFIX)
}

/// The first variable of `env` that is Lifeboat's, with its index.
pub fn first_reserved(env: &[EnvVar]) -> Option<(usize, &str)> {
    env.iter()
        .enumerate()
        .find(|(_, e)| is_reserved(&e.name))
        .map(|(i, e)| (i, e.name.as_str()))
}

/// The message for a reserved variable `name` in user-supplied environment.
pub fn refusal(name: &str) -> String {
    format!(
        "sets {name}, which Lifeboat sets for the mover itself (the LIFEBOAT_ mover settings and \
         every AWS_ variable are reserved); remove it or use another name"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(name: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some("x".into()),
            ..Default::default()
        }
    }

    #[test]
    fn lifeboats_own_names_and_every_aws_variable_are_reserved() {
        for n in [
            "LIFEBOAT_REPO",
            "LIFEBOAT_TARGET_DIR",
            "AWS_ACCESS_KEY_ID",
            "AWS_ENDPOINT_URL",
        ] {
            assert!(is_reserved(n), "{n}");
        }
        for n in ["LIFEBOAT_COMPRESSION_LEVEL", "HTTPS_PROXY", "TZ"] {
            assert!(!is_reserved(n), "{n}");
        }
        assert_eq!(
            first_reserved(&[var("TZ"), var("AWS_REGION")]),
            Some((1, "AWS_REGION"))
        );
    }
}
