"""A non-Go OAuth 2.0 client against a running keygate.

Gets a token with Authlib (client_secret_basic), then verifies it against
keygate's JWKS with PyJWT, an independent JOSE library, checking typ, iss,
aud and exp. Prints the token's sub and the token on success.

usage: oauth_client.py API_URL CA_FILE CLIENT_ID ISSUER   (secret on stdin)
"""
import json
import sys
import time

import jwt
import requests
from authlib.integrations.requests_client import OAuth2Session

api, ca, client_id, issuer = sys.argv[1:5]
secret = sys.stdin.readline().strip()

session = OAuth2Session(client_id, secret, token_endpoint_auth_method="client_secret_basic")
session.verify = ca
token = session.fetch_token(api + "/oauth2/token", grant_type="client_credentials")
access = token["access_token"]

header = jwt.get_unverified_header(access)
if header.get("typ") != "at+jwt":
    sys.exit("typ is %r, want at+jwt" % header.get("typ"))
jwks = requests.get(api + "/.well-known/jwks.json", verify=ca, timeout=10).json()
keys = [k for k in jwks["keys"] if k.get("kid") == header["kid"]]
if len(keys) != 1 or "d" in keys[0]:
    sys.exit("the JWKS does not hold exactly one public key for kid %s" % header["kid"])
key = jwt.PyJWK(keys[0])
claims = jwt.decode(
    access,
    key.key,
    algorithms=[header["alg"]],
    audience=issuer,
    issuer=issuer,
    options={"require": ["exp", "iss", "aud", "sub"]},
)
if not time.time() < claims["exp"] <= time.time() + 3600:
    sys.exit("exp %s is not within the next hour" % claims["exp"])
print(json.dumps({"sub": claims["sub"], "client_id": claims["client_id"], "access_token": access}))
