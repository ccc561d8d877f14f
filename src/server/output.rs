//! How a server connection prints values: what binary negotiation must
//! know of the connection to turn binary values back into the exact text
//! the server would have sent (`client::negotiate`).
//!
//! It owns the connection's settings at login and the text settings last
//! worked out from them; the session's settings (what clients changed) are
//! the session's (`ServerSession::settings`). It must not guess: a setting
//! pglane did not see set exactly stays unknown, and the values that
//! depend on it are not negotiated.

use std::cell::{Ref, RefCell};

use crate::formats::TextSettings;
use crate::settings::Settings;

/// How a server connection prints values, as negotiating a Bind needs to
/// know: the settings it had at login, and the [`server_text_settings`]
/// last worked out from them and its session's settings. The connection
/// holds it (`ServerConn::output`) and shares it with a client whose request
/// goes to the server behind another's (`pool::Opening`), which negotiates
/// its Binds against the same connection.
#[derive(Debug, Default)]
pub struct ConnectionOutput {
    at_login: TextSettings,
    /// The last text settings, with the `Settings::version` they were
    /// worked out for.
    last: RefCell<(Option<u64>, TextSettings)>,
}

impl ConnectionOutput {
    /// From the ParameterStatus values the server reported at `login` and
    /// its unreported output settings then (`output_defaults`: its
    /// extra_float_digits and bytea_output, empty if pglane did not ask).
    pub fn new(login: &[(String, String)], output_defaults: &[(String, String)]) -> ConnectionOutput {
        let mut at_login = TextSettings::default();
        for (name, value) in login.iter().chain(output_defaults) {
            at_login.apply(name, value);
        }
        ConnectionOutput { at_login, last: RefCell::default() }
    }

    /// [`server_text_settings`] of this connection with `server`, worked
    /// out again only when those changed: every negotiated Bind asks.
    pub fn text_settings(&self, server: &Settings) -> Ref<'_, TextSettings> {
        let version = Some(server.version());
        if self.last.borrow().0 != version {
            let settings = server_text_settings(&self.at_login, server);
            *self.last.borrow_mut() = (version, settings);
        }
        Ref::map(self.last.borrow(), |(_, settings)| settings)
    }
}

/// The settings the server connection's values are printed with: those it
/// had at login (see [`ConnectionOutput::new`]), then what clients changed
/// since (`server`): reported values, and the output settings pglane set or
/// followed exactly (unknown ones stay unknown).
pub fn server_text_settings(at_login: &TextSettings, server: &Settings) -> TextSettings {
    let mut settings = at_login.clone();
    for (name, value) in server.reported() {
        settings.apply(name, value);
    }
    for (name, value) in server.output() {
        settings.apply(name, value.unwrap_or(""));
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text settings of a connection that had `login` and
    /// `output_defaults` at login and `server`'s settings now.
    fn of(login: &[(String, String)], output_defaults: &[(String, String)], server: &Settings) -> TextSettings {
        server_text_settings(&ConnectionOutput::new(login, output_defaults).at_login, server)
    }

    #[test]
    fn server_settings_are_login_values_then_changes() {
        use crate::settings::Value;
        let login = vec![("DateStyle".to_owned(), "ISO, MDY".to_owned()), ("TimeZone".to_owned(), "Europe/Berlin".to_owned())];
        let mut server = Settings::default();
        assert_eq!(of(&login, &[], &server).time_zone, None);
        assert_eq!(of(&login, &[], &server).extra_float_digits, None, "not asked: unknown");
        let defaults = vec![("extra_float_digits".to_owned(), "1".to_owned()), ("bytea_output".to_owned(), "hex".to_owned())];
        assert_eq!(of(&login, &defaults, &server).extra_float_digits, Some(1));
        server.set("TimeZone", Value::Reported("Etc/UTC".into()));
        server.set("extra_float_digits", Value::Sql("3".into()));
        let s = of(&login, &defaults, &server);
        assert!(s.time_zone.is_some());
        assert_eq!(s.extra_float_digits, Some(3), "a followed SET");
        server.set("extra_float_digits", Value::Plain("-15".into()));
        assert_eq!(of(&login, &defaults, &server).extra_float_digits, Some(-15), "a startup value pglane set");
        server.set("extra_float_digits", Value::Sql("2.6".into()));
        assert_eq!(of(&login, &defaults, &server).extra_float_digits, None, "PostgreSQL rounds, pglane does not guess");
        server.set("extra_float_digits", Value::Unknown);
        server.set("bytea_output", Value::Unknown);
        let s = of(&login, &defaults, &server);
        assert_eq!((s.extra_float_digits, s.bytea_output), (None, None));
    }

    #[test]
    fn a_connections_text_settings_are_worked_out_again_when_its_settings_change() {
        use crate::settings::Value;
        let login = vec![("TimeZone".to_owned(), "UTC".to_owned())];
        let output = ConnectionOutput::new(&login, &[]);
        let mut server = Settings::default();
        let utc = output.text_settings(&server).time_zone;
        assert!(utc.is_some());
        assert_eq!(output.text_settings(&server).time_zone, utc, "kept");
        server.set("TimeZone", Value::Reported("+05:30".into()));
        assert_ne!(output.text_settings(&server).time_zone, utc, "worked out again");
        assert_eq!(*output.text_settings(&server), of(&login, &[], &server));
    }
}
