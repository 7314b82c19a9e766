/** A user's credentials for one registry, from auth.json, --creds or a credential helper. */
export interface Credentials {
  username?: string;
  password?: string;
  /** An OAuth2 refresh token ("identitytoken" in auth.json). */
  identityToken?: string;
}
