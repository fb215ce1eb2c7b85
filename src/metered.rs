//! Metered links: NetworkManager's `Metered` property, read over the system
//! bus, for a pull that waits them out (`--defer-if-metered`, which the
//! installed timer's unit passes; rpm-ostree#4844, bootc#1375). As bootc, only
//! that automatic path asks: a pull an operator or the machine-config daemon
//! starts goes whatever the link.

use anyhow::Context;

use crate::error::{Kind, fail};

/// NetworkManager's well-known name, object path and interface.
const NM: &str = "org.freedesktop.NetworkManager";
const NM_PATH: &str = "/org/freedesktop/NetworkManager";

/// NetworkManager's `NMMetered`: 1 (yes) and 3 (guess-yes) defer a pull;
/// 2 (no), 4 (guess-no) and 0 (unknown) do not.
pub fn defers(metered: u32) -> bool {
    matches!(metered, 1 | 3)
}

/// How NetworkManager names an `NMMetered` value.
fn name(metered: u32) -> &'static str {
    match metered {
        0 => "unknown",
        1 => "yes",
        2 => "no",
        3 => "guess-yes",
        4 => "guess-no",
        _ => "not an NMMetered value",
    }
}

/// `Metered`, or None when NetworkManager is not on the system bus (asked
/// first, so that a stopped NetworkManager is not started by bus activation).
async fn metered() -> anyhow::Result<Option<u32>> {
    let conn = zbus::Connection::system()
        .await
        .context("connecting to the system bus")?;
    let bus: zbus::Proxy = zbus::proxy::Builder::new(&conn)
        .destination("org.freedesktop.DBus")?
        .path("/org/freedesktop/DBus")?
        .interface("org.freedesktop.DBus")?
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    let owned: bool = bus.call("NameHasOwner", &(NM,)).await?;
    if !owned {
        return Ok(None);
    }
    let nm: zbus::Proxy = zbus::proxy::Builder::new(&conn)
        .destination(NM)?
        .path(NM_PATH)?
        .interface(NM)?
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    let v: u32 = nm
        .get_property("Metered")
        .await
        .context("reading NetworkManager's Metered")?;
    Ok(Some(v))
}

/// Exit 12 (deferred) while NetworkManager says the connection is metered.
/// Without NetworkManager on the bus, or without a bus, the link counts as
/// unmetered.
pub async fn check() -> anyhow::Result<()> {
    match metered().await {
        Ok(Some(v)) if defers(v) => fail(
            Kind::Deferred,
            format!(
                "deferred: NetworkManager says the connection is metered (Metered={v}, {}); \
                 --allow-metered or allow-metered = true pulls over it",
                name(v)
            ),
        ),
        Ok(Some(v)) => {
            tracing::info!("NetworkManager: Metered={v} ({}), pulling", name(v));
            Ok(())
        }
        Ok(None) => {
            tracing::info!("NetworkManager is not on the system bus: the link counts as unmetered");
            Ok(())
        }
        Err(e) => {
            tracing::warn!(
                "cannot ask NetworkManager whether the link is metered ({e:#}): it counts as unmetered"
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn yes_and_guess_yes_defer() {
        let got: Vec<bool> = (0..=5).map(super::defers).collect();
        assert_eq!(got, [false, true, false, true, false, false]);
    }
}
