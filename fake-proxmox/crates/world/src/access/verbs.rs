//! The access family's decisions on a request: logging in (or renewing a ticket), whose
//! permissions a caller may read, and API tokens (who may manage them, create, change,
//! delete).

use crate::access::model::{Identity, Token};
use crate::request::Request;
use crate::wire::PveError;
use crate::world::Site;

/// `401 authentication failure`, PVE's one answer to every failed login.
pub fn auth_failure() -> PveError {
    PveError::new(401, "authentication failure\n")
}

impl Site {
    /// `POST /access/ticket`: the user that `username`/`password` (or a still-valid ticket
    /// of the same user, for renewal) log in as.
    pub fn authenticate(&self, req: &Request) -> Result<String, PveError> {
        let username = req.p.req_str("username")?;
        let password = req.p.req_str("password")?;
        let realm = req.p.str("realm");
        let userid = if username.contains('@') {
            username.clone()
        } else {
            format!("{username}@{}", realm.as_deref().unwrap_or("pam"))
        };
        let user = match self.access.verify_ticket(&password, req.now) {
            Some(u) if u == userid => Some(u),
            _ => self.access.login(&username, &password, realm.as_deref()),
        };
        // `check_user_enabled`: an expired account cannot log in; nor a user of a realm
        // that no longer exists.
        let user = user.filter(|u| {
            let realm = u.rsplit_once('@').map_or("", |(_, r)| r);
            self.access.user_enabled(u, req.now) && self.access.realms.contains_key(realm)
        });
        user.ok_or_else(auth_failure)
    }

    /// Verify mode of `POST /access/ticket`: `user` holds every one of `privs` on `path`.
    pub fn verify_privs(&self, user: &str, path: &str, privs: &str) -> Result<(), PveError> {
        let id = Identity {
            userid: user.to_string(),
            tokenid: None,
        };
        let all = privs
            .split([',', ';', ' '])
            .filter(|p| !p.is_empty())
            .all(|p| self.access.has(&id, path, p));
        if all { Ok(()) } else { Err(auth_failure()) }
    }

    /// `GET /access/permissions`: whose permissions to list; someone else's need
    /// `Sys.Audit` on `/access`.
    pub fn permissions_of(&self, req: &Request) -> Result<Identity, PveError> {
        match req.p.str("userid") {
            Some(u) if u != req.who.task_user() && u != req.who.userid => {
                self.require(&req.who, "/access", "Sys.Audit")?;
                let (userid, tokenid) = match u.split_once('!') {
                    Some((user, _)) => (user.to_string(), Some(u.clone())),
                    None => (u.clone(), None),
                };
                Ok(Identity { userid, tokenid })
            }
            _ => Ok(req.who.clone()),
        }
    }

    /// The token request's user and full token id (`user!name`), once the caller may
    /// manage that user's tokens (the user itself, or `User.Modify`).
    pub fn token_admin(&self, req: &Request) -> Result<(String, String), PveError> {
        let userid = req.p.req_str("userid")?;
        let full = match req.p.str("tokenid") {
            Some(t) => format!("{userid}!{t}"),
            None => String::new(),
        };
        if !(req.who.userid == userid && req.who.tokenid.is_none()) {
            self.require(&req.who, &format!("/access/users/{userid}"), "User.Modify")?;
        }
        Ok((userid, full))
    }

    /// A user's tokens: the user must exist.
    pub fn tokens_of(&self, req: &Request) -> Result<Vec<&Token>, PveError> {
        let (userid, _) = self.token_admin(req)?;
        if !self.access.users.contains_key(&userid) {
            return Err(PveError::die(format!("no such user ('{userid}')")));
        }
        let prefix = format!("{userid}!");
        Ok(self
            .access
            .tokens
            .values()
            .filter(|t| t.tokenid.starts_with(&prefix))
            .collect())
    }

    /// `GET /access/users/{userid}/token/{tokenid}`: the token, once the caller may manage the
    /// user's tokens.
    ///
    /// # Errors
    /// Permission denied (see `token_admin`), no such user, or no such token.
    pub fn token(&self, req: &Request) -> Result<&Token, PveError> {
        let (userid, full) = self.token_admin(req)?;
        self.access.tokens.get(&full).ok_or_else(|| {
            PveError::die(format!(
                "no such token '{}' for user '{userid}'",
                req.p.str("tokenid").unwrap_or_default()
            ))
        })
    }

    /// `POST …/token/{tokenid}`: the new token and its secret (shown this once).
    pub fn create_token(&mut self, req: &Request) -> Result<(Token, String), PveError> {
        let (userid, full) = self.token_admin(req)?;
        if !self.access.users.contains_key(&userid) {
            return Err(PveError::die(format!("no such user ('{userid}')")));
        }
        if self.access.tokens.contains_key(&full) {
            return Err(PveError::die("Token already exists."));
        }
        let secret = self.access.new_token_secret(&format!("{full}{}", req.now));
        let t = Token {
            tokenid: full.clone(),
            secret: secret.clone(),
            privsep: req.p.bool("privsep").unwrap_or(true),
            comment: req.p.str("comment"),
            expire: req.p.int("expire").unwrap_or(0).max(0) as u64,
        };
        self.access.tokens.insert(full, t.clone());
        Ok((t, secret))
    }

    /// `PUT …/token/{tokenid}`: privsep, comment and expiry as given.
    pub fn update_token(&mut self, req: &Request) -> Result<&Token, PveError> {
        let (userid, full) = self.token_admin(req)?;
        let (privsep, comment, expire) = (
            req.p.bool("privsep"),
            req.p.str("comment"),
            req.p.int("expire"),
        );
        let t = self
            .access
            .tokens
            .get_mut(&full)
            .ok_or_else(|| PveError::die(format!("no such token for user '{userid}'")))?;
        if let Some(p) = privsep {
            t.privsep = p;
        }
        if let Some(cm) = comment {
            t.comment = Some(cm);
        }
        if let Some(e) = expire {
            t.expire = e.max(0) as u64;
        }
        Ok(t)
    }

    /// `DELETE …/token/{tokenid}`: the token and its ACL entries go.
    pub fn delete_token(&mut self, req: &Request) -> Result<(), PveError> {
        let (userid, full) = self.token_admin(req)?;
        if self.access.tokens.remove(&full).is_none() {
            return Err(PveError::die(format!("no such token for user '{userid}'")));
        }
        self.access.acls.retain(|a| a.ugid != full);
        Ok(())
    }
}
