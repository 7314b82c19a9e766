// Every `bundle cluster` command against the hostile stand-in API server answering what an API
// server never sends (an HTML page, a gzip body never asked for, an empty body): one line
// API_NOT_JSON naming the server, exit 1. (The other attacks: hostile-api.test.ts.)
import t from 'tap';
import { everyCommandRefuses, hostileSetup } from './hostile-api-setup.js';

everyCommandRefuses(t, await hostileSetup(t), [
  ['html-json', 'API_NOT_JSON', /"text\/html", not JSON/],
  ['html-page', 'API_NOT_JSON', /"text\/html; charset=utf-8", not JSON/],
  ['gzip', 'API_NOT_JSON', /a body encoded "gzip" \(none was asked for\)/],
  ['empty-json', 'API_NOT_JSON', /with an empty body/],
]);
